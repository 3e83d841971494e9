package report

import (
	"strings"
	"testing"
)

func peerScenario(nodes int, par string, perNode, wall, peerWall Seconds, ourWrites, peerWrites int) Scenario {
	return Scenario{Nodes: nodes, Parallelism: par, Effective: nodes / 10, PerNode: perNode, Wall: wall - 2, DriverRollout: 2, Upgraded: nodes,
		Requests: []Count{{Verb: "patch", Resource: "nodes", N: ourWrites, Write: true}, {Verb: "watch", Resource: "nodes", N: 1}},
		Peer: &Peer{Wall: peerWall, Upgraded: nodes, Reconciles: 12, ByTrigger: map[string]int{"event": 10, "requeue": 2},
			Acting: 30, WaitRequeue: 240, Other: 5, CPU: 4, PeakMB: 55,
			Requests: []Count{
				{Verb: "patch", Resource: "nodes", N: peerWrites - nodes - 10, Write: true},
				{Verb: "create", Resource: "events", N: nodes, Write: true},
				{Verb: "update", Resource: "leases", N: 10, Write: true},
				{Verb: "list", Resource: "pods", N: 3 * nodes},
			}}}
}

func TestMarkdownPeerTable(t *testing.T) {
	s := peerScenario(100, "10%", 20, 202, 1275, 950, 2120)
	md := Markdown(Report{Scenarios: []Scenario{s}, PeerLibrary: "github.com/NVIDIA/k8s-operator-libs v0"})
	for _, want := range []string{
		"NVIDIA's upgrade library (github.com/NVIDIA/k8s-operator-libs v0)",
		"| 100 | 10% (10) | 20.0 s | 202 s (2.0 s + 200 s) | 1275 s | 0.158 | 9.5 / 21.2 (1.0, 0.1) | 0.00 / 3.00 | 12 (10 / 2 / 0) | 30.0 s / 240 s / 5.0 s | 4.0 s | 55 MiB |",
		"| 100 | 10% | 20.0 s | patch nodes 20.10, create events 1.00, update leases 0.10, list pods 3.00 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in:\n%s", want, md)
		}
	}
	if md := Markdown(Report{Scenarios: []Scenario{{Nodes: 10, Parallelism: "1"}}}); strings.Contains(md, "against the peer") {
		t.Fatalf("peer table without a peer run:\n%s", md)
	}
}

func TestPeerTargets(t *testing.T) {
	good := peerScenario(1000, "10%", 20, 240, 1500, 9000, 21000)
	pure := peerScenario(100, "unlimited", 0, 9, 44, 900, 2100)
	ts := peerTargets([]Scenario{good, pure, {Nodes: 5000, Parallelism: "unlimited"}})
	if len(ts) != 3 {
		t.Fatalf("targets %+v: want the realistic 10%% ratio, the worst ratio and writes", ts)
	}
	for _, tg := range ts {
		if !tg.Met {
			t.Errorf("target %+v: want met", tg)
		}
	}
	if !strings.Contains(ts[1].Got, "0.205") || !strings.Contains(ts[1].Got, "unlimited") {
		t.Errorf("worst ratio %q: want 0.205 of the unlimited scenario", ts[1].Got)
	}

	slow := peerScenario(100, "10%", 20, 400, 1200, 1500, 1200)
	ts = peerTargets([]Scenario{slow})
	if ts[0].Met || !strings.Contains(ts[0].Got, "0.333") {
		t.Errorf("ratio target %+v: want missed at 0.333", ts[0])
	}
	if ts[2].Met || !strings.Contains(ts[2].Got, "15.0 against 12.0") {
		t.Errorf("writes target %+v: want missed naming 15.0 against 12.0", ts[2])
	}
	if got := peerTargets([]Scenario{{Nodes: 100, Parallelism: "10%", PerNode: 20}}); got != nil {
		t.Errorf("targets without a peer run: %+v", got)
	}
}

func TestMarkdownPeerTableMarksAProjection(t *testing.T) {
	s := peerScenario(100, "1", 0, 14, 12100, 900, 2100)
	s.Peer.Sampled, s.Peer.SampleWall, s.Peer.Upgraded = 5, 605, 5
	md := Markdown(Report{Scenarios: []Scenario{s}})
	if want := "| 12100 s projected (5 of 100 nodes in 605 s) | 0.001 |"; !strings.Contains(md, want) {
		t.Errorf("missing %q in:\n%s", want, md)
	}
	// Per-node figures are the sample's: its requests over its 5 nodes.
	if want := "list pods 60.00"; !strings.Contains(md, want) {
		t.Errorf("missing %q (requests per sampled node) in:\n%s", want, md)
	}
}
