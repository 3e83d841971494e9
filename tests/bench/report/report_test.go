package report

import (
	"fmt"
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/tests/bench/steplat"
)

func TestStepCausesAreTheRecordedKinds(t *testing.T) {
	var kinds []string
	for _, k := range steplat.Kinds {
		kinds = append(kinds, string(k))
	}
	if fmt.Sprint(kinds) != fmt.Sprint(stepCauses) {
		t.Fatalf("report columns %q, steplat kinds %q", stepCauses, kinds)
	}
}

func TestMarkdownStepColumns(t *testing.T) {
	s := Scenario{Nodes: 10, Parallelism: "1", Effective: 1, Upgraded: 10, StepsByWhy: map[string]Latency{
		string(steplat.Rebooted):  {N: 10, P50: 0.004, P99: 0.012},
		string(steplat.Validated): {N: 10, P50: 0.02, P99: 1.5},
	}}
	md := Markdown(Report{Scenarios: []Scenario{s}})
	if !strings.Contains(md, "| 10 | 1 | 0 s | — | — | 4 ms / 12 ms | 20 ms / 1.5 s | — |") {
		t.Fatalf("step latency row missing:\n%s", md)
	}
}

func TestMarkdownCycleSplit(t *testing.T) {
	s := Scenario{Nodes: 1000, Parallelism: "10%", Effective: 100, PerNode: 20, Upgraded: 1000, CycleMean: 23.5, CycleRollout: 0.5,
		StepsByWhy: map[string]Latency{string(steplat.Admitted): {N: 900, P50: 0.1, P99: 1, Mean: 0.2}}}
	md := Markdown(Report{Scenarios: []Scenario{s}})
	if !strings.Contains(md, "| 1000 | 10% | 20.0 s | 23.5 s | 500 ms | — | 3.0 s | 200 ms |") {
		t.Fatalf("cycle row missing:\n%s", md)
	}
	// With the rollout's profile: 45 s of requests over 1,000 nodes.
	s.RolloutAPIRequests, s.RolloutAPIWait = 9000, 45
	if md := Markdown(Report{Scenarios: []Scenario{s}}); !strings.Contains(md, "| 1000 | 10% | 20.0 s | 23.5 s | 500 ms | 45 ms | 3.0 s | 200 ms |") {
		t.Fatalf("cycle row with the API time missing:\n%s", md)
	}
	if md := Markdown(Report{Scenarios: []Scenario{{Nodes: 10, Parallelism: "1"}}}); strings.Contains(md, "Where a node's upgrade time goes") {
		t.Fatalf("cycle table without a measured cycle:\n%s", md)
	}
}

func TestMarkdownClusterLoad(t *testing.T) {
	s := Scenario{Nodes: 1000, Parallelism: "10%", Effective: 100, PerNode: 20, Upgraded: 1000,
		API: &APILoad{Seconds: 250, WritesPerSecond: 151.4, Busiest: []OpLoad{
			{Op: "PATCH nodes", PerSecond: 54.7, Mean: 0.0996, P50: 0.1, P99: 0.6},
			{Op: "PATCH pods/status", PerSecond: 21.7, Mean: 0.165, P50: 0.2, P99: 0.6}}},
		CPU: []ProcessCPU{{Name: "kube-apiserver", Cores: 0.53}, {Name: "npu-hooks rollout", Cores: 0.085}}}
	md := Markdown(Report{Machine: Machine{Cores: 2}, Scenarios: []Scenario{s}})
	want := "| 1000 | 10% | 20.0 s | 151 | PATCH nodes 55/s, 100 ms / ≤ 600 ms; PATCH pods/status 22/s, 165 ms / ≤ 600 ms | kube-apiserver 0.53, npu-hooks rollout 0.09; total 0.61 |"
	if !strings.Contains(md, want) || !strings.Contains(md, "in cores of the 2") {
		t.Fatalf("cluster load row missing, want\n%s\nin:\n%s", want, md)
	}
	if md := Markdown(Report{Scenarios: []Scenario{{Nodes: 10, Parallelism: "1"}}}); strings.Contains(md, "The cluster during each rollout") {
		t.Fatalf("cluster load table without a measurement:\n%s", md)
	}
}

// The nodes a rollout left behind are named under the main table.
func TestMarkdownNamesTheNodesLeftBehind(t *testing.T) {
	md := Markdown(Report{Scenarios: []Scenario{{Nodes: 100, Parallelism: "10%", Effective: 10,
		LeftBehind: []string{"left behind: bench-wedged-100 (driver 1.0.0): a recovery reboot is pending"}}}})
	if !strings.Contains(md, "each rollout left it behind") || !strings.Contains(md, "bench-wedged-100") {
		t.Errorf("report does not name the node left behind:\n%s", md)
	}
}
