package suite

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openfuyao/npu-stack/tests/bench/report"
)

func TestOnlyKeepsTheAskedFleetsInTheirOrder(t *testing.T) {
	full, err := PlanFor("full")
	if err != nil {
		t.Fatal(err)
	}
	p, err := full.Only([]int{5000, 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Fleets) != 2 || p.Fleets[0].Nodes != 5000 || p.Fleets[1].Nodes != 100 {
		t.Fatalf("fleets %+v: want 5000 then 100", p.Fleets)
	}
	if len(p.Fleets[0].Specs) == 0 {
		t.Fatal("a kept fleet lost its scenarios")
	}
	if p, _ := full.Only(nil); len(p.Fleets) != len(full.Fleets) {
		t.Fatalf("no sizes must keep all %d fleets, kept %d", len(full.Fleets), len(p.Fleets))
	}
	if _, err := full.Only([]int{300}); err == nil || !strings.Contains(err.Error(), "100, 1000, 5000") {
		t.Fatalf("an unknown size must be refused naming the sizes there are, got %v", err)
	}
}

func TestHeartbeatStaysWithinTheGracePeriod(t *testing.T) {
	for _, tc := range []struct {
		nodes       int
		every       time.Duration
		customGrace bool
	}{
		{100, 20 * time.Second, false},
		{500, 20 * time.Second, false},
		{501, 40 * time.Second, true},
		{1000, 40 * time.Second, true},
		{5000, 200 * time.Second, true},
	} {
		every, grace := heartbeat(tc.nodes)
		if every != tc.every {
			t.Errorf("N=%d: renew every %s, want %s", tc.nodes, every, tc.every)
		}
		effective := grace
		if effective == 0 {
			effective = 50 * time.Second // the controller manager's default
		}
		// Small fleets keep the default; larger ones, whose renewals lag
		// on 2 cores, must tolerate a lag of several periods.
		periods := 2
		if tc.customGrace {
			periods = 5
		}
		if (grace != 0) != tc.customGrace || effective < time.Duration(periods)*every {
			t.Errorf("N=%d: grace %s for renewals every %s: want at least %d renewals per grace period", tc.nodes, grace, every, periods)
		}
		limit := 50.0
		if tc.nodes > 500 {
			limit = 25
		}
		if rate := float64(tc.nodes) / every.Seconds(); rate > limit {
			t.Errorf("N=%d: %.0f renewals a second, want at most %.0f", tc.nodes, rate, limit)
		}
	}
}

func TestRerenderMakesOneTableOfSeveralRuns(t *testing.T) {
	dir := t.TempDir()
	m := report.Machine{CPU: "x", Cores: 2}
	small := report.Report{Date: "d1", Commit: "abc", Mode: "full", Machine: m, Scenarios: []report.Scenario{{Nodes: 100}},
		Agents: []report.Agent{{Name: "npu-rebooter run"}}, Notes: []string{"a"}}
	big := report.Report{Date: "d2", Commit: "abc", Mode: "full", Machine: m, Scenarios: []report.Scenario{{Nodes: 5000}, {Nodes: 5000}}, Notes: []string{"a", "b"}}
	paths := []string{filepath.Join(dir, "small.json"), filepath.Join(dir, "big.json")}
	for i, r := range []report.Report{small, big} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(paths[i], b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "out")
	r, err := Rerender(paths, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Scenarios) != 3 || r.Scenarios[0].Nodes != 100 || r.Scenarios[2].Nodes != 5000 {
		t.Fatalf("scenarios %+v: want the 100-node one then both 5,000-node ones", r.Scenarios)
	}
	if len(r.Agents) != 1 || r.Date != "d1 and d2" || len(r.Notes) != 2 {
		t.Fatalf("agents %d, date %q, notes %v: want the first run's agents, both dates, notes once each", len(r.Agents), r.Date, r.Notes)
	}
	if _, err := os.Stat(filepath.Join(out, "results.md")); err != nil {
		t.Fatal(err)
	}
	big.Mode = "quick"
	b, _ := json.Marshal(big)
	if err := os.WriteFile(paths[1], b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Rerender(paths, out); err == nil || !strings.Contains(err.Error(), "not one table") {
		t.Fatalf("a quick and a full run must not merge, got %v", err)
	}
	// Runs at two commits, or at a dirty one, are not one table either.
	for _, commit := range []string{"def", "abc-dirty"} {
		big.Mode, big.Commit = "full", commit
		b, _ = json.Marshal(big)
		if err := os.WriteFile(paths[1], b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Rerender(paths, out); err == nil || !strings.Contains(err.Error(), "not one table") {
			t.Fatalf("runs at commits abc and %s must not merge, got %v", commit, err)
		}
	}
}

func TestDescribeCommit(t *testing.T) {
	if got := describeCommit("abc123\n", ""); got != "abc123" {
		t.Errorf("clean: %q", got)
	}
	if got := describeCommit("abc123\n", " M tests/bench/x.go\n"); got != "abc123-dirty" {
		t.Errorf("changed: %q", got)
	}
}

// BENCH=realistic: N = 10, 300 s per node in real time, 2 at once, both
// sides at the same time on fleets of their own; every other scenario
// runs at 1:30 with the peer's timers alike.
func TestRealisticPlanIsUnscaledAndTogether(t *testing.T) {
	p, err := PlanFor("realistic")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Fleets) != 1 || p.Fleets[0].Nodes != 10 || !p.Fleets[0].PeerApart || len(p.Fleets[0].Specs) != 1 {
		t.Fatalf("realistic fleets %+v: want one of 10 nodes, the peer's apart, one scenario", p.Fleets)
	}
	s := p.Fleets[0].Specs[0]
	if s.Timing.Total() != 300*time.Second || s.TimeScale != 1 || s.Parallelism.MaxParallelUpgrades(10) != 2 || !s.Peer || !s.Together {
		t.Fatalf("realistic scenario %+v: want 300 s per node, real time, 2 at once, together with the peer", s)
	}
	for _, mode := range []string{"quick", "full"} {
		p, _ := PlanFor(mode)
		for _, f := range p.Fleets {
			for _, s := range f.Specs {
				if s.TimeScale != Scaled {
					t.Errorf("%s N=%d %s: time scale %v, want %v", mode, f.Nodes, s.Parallelism.Label, s.TimeScale, Scaled)
				}
			}
		}
	}
	full, _ := PlanFor("full")
	last := full.Fleets[len(full.Fleets)-1]
	if last.Nodes != 10000 || last.Specs[0].Peer {
		t.Errorf("full's last fleet %+v: want 10,000 nodes, npu-stack alone", last)
	}
}

func TestOnlyResizesTheQuickFleet(t *testing.T) {
	quick, _ := PlanFor("quick")
	p, err := quick.Only([]int{20})
	if err != nil || len(p.Fleets) != 1 || p.Fleets[0].Nodes != 20 || len(p.Fleets[0].Specs) != len(quick.Fleets[0].Specs) {
		t.Fatalf("quick -nodes 20: %+v, %v", p.Fleets, err)
	}
	if quick.Fleets[0].Nodes != 100 {
		t.Fatal("resizing changed the plan it came from")
	}
}

func TestPlansRunThePeerWhereTheReportComparesIt(t *testing.T) {
	quick, err := PlanFor("quick")
	if err != nil {
		t.Fatal(err)
	}
	var peers []string
	for _, f := range quick.Fleets {
		for _, s := range f.Specs {
			if s.Peer {
				peers = append(peers, fmt.Sprintf("N=%d %s", f.Nodes, s.Parallelism.Label))
			}
		}
	}
	if len(peers) != 2 || !strings.HasPrefix(peers[0], "N=100 ") {
		t.Fatalf("quick runs the peer in %v: want two scenarios at N = 100 (one after npu-stack, one at once)", peers)
	}
	full, err := PlanFor("full")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range full.Fleets {
		for _, s := range f.Specs {
			if want := f.Nodes == 100 || f.Nodes == 1000; s.Peer != want || s.Together {
				t.Errorf("full, N=%d %s %s: peer %t, want %t", f.Nodes, s.Parallelism.Label, s.Timing.Total(), s.Peer, want)
			}
		}
	}
	if p := hasPeer(quick.Fleets[0], "bin"); p != "bin" {
		t.Errorf("hasPeer of the quick fleet %q, want the binary", p)
	}
}

// The report names the profiles relative to its own directory, so the
// paths hold once the results are copied elsewhere (docs/bench).
func TestProfilesAreNamedRelativeToTheResults(t *testing.T) {
	got := relativeTo(".cache/bench", []string{".cache/bench/n20/rollout-n20-p10-t1s.profile/cpu.pprof", "/elsewhere/peak.json"})
	if len(got) != 2 || got[0] != "n20/rollout-n20-p10-t1s.profile/cpu.pprof" || got[1] != "/elsewhere/peak.json" {
		t.Errorf("relative paths %q", got)
	}
}
