package report

import (
	"strings"
	"testing"
)

func TestMarkdownRolloutProcess(t *testing.T) {
	profiled := Scenario{Nodes: 1000, Parallelism: "10%", Effective: 100, PerNode: 20, Upgraded: 1000,
		RolloutCPU: 4.2, RolloutCPUPerNodeMs: 4.2, RolloutPeakMB: 120, RolloutPeakGoroutines: 412, RolloutPeakHeapMB: 61.4,
		RolloutAPIRequests: 9000, RolloutAPIWait: 45,
		RolloutProfiles: []string{"n1000/rollout-n1000-p10-t20s.profile/cpu.pprof", "n1000/rollout-n1000-p10-t20s.profile/peak.json"}}
	for _, tc := range []struct {
		name string
		ss   []Scenario
		want []string // empty: no table
	}{
		{"profiled", []Scenario{profiled}, []string{
			"| 1000 | 10% | 20.0 s | 4.2 s | 4.20 ms | 412 | 61 MiB | 120 MiB | 9000 | 45.0 s / 5.0 ms | `n1000/rollout-n1000-p10-t20s.profile/` |"}},
		// Results written before the profiles: no table, not a row of zeros.
		{"before the profiles", []Scenario{{Nodes: 1000, Parallelism: "10%", Upgraded: 1000, RolloutCPU: 4.2, RolloutPeakMB: 120}}, nil},
		{"only the profiled row", []Scenario{{Nodes: 100, Parallelism: "1", Upgraded: 100}, profiled}, []string{"| 1000 | 10% | 20.0 s | 4.2 s | 4.20 ms |"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := Markdown(Report{Scenarios: tc.ss})
			has := strings.Contains(md, "`npu-hooks rollout` as a process")
			if has != (len(tc.want) > 0) {
				t.Fatalf("process table shown %t, want %t:\n%s", has, len(tc.want) > 0, md)
			}
			for _, w := range tc.want {
				if !strings.Contains(md, w) {
					t.Errorf("missing %q in:\n%s", w, md)
				}
			}
			if strings.Count(md, "| 100 | 1 | 0 s | 0 s | 0.00 ms |") > 0 {
				t.Errorf("an unprofiled scenario has a row:\n%s", md)
			}
		})
	}
}

func TestCPUPerNodeTarget(t *testing.T) {
	for _, tc := range []struct {
		name             string
		ss               []Scenario
		notMeasured, met bool
		got              string
	}{
		{"no fleet of 1,000", []Scenario{{Nodes: 100, Upgraded: 100, RolloutCPU: 5}}, true, false, "not in this run"},
		{"within", []Scenario{{Nodes: 1000, Parallelism: "10%", Upgraded: 1000, RolloutCPU: 4.2, RolloutCPUPerNodeMs: 4.2},
			{Nodes: 10000, Parallelism: "10%", Upgraded: 10000, RolloutCPU: 31, RolloutCPUPerNodeMs: 3.1},
			{Nodes: 100, Upgraded: 100, RolloutCPU: 5, RolloutCPUPerNodeMs: 50}}, false, true, "4.20 ms, worst (N=1000, parallelism 10%"},
		{"missed at 10,000", []Scenario{{Nodes: 1000, Parallelism: "10%", Upgraded: 1000, RolloutCPUPerNodeMs: 4.2},
			{Nodes: 10000, Parallelism: "10%", Upgraded: 10000, RolloutCPUPerNodeMs: 6.5}}, false, false, "missed in 1 of 2 scenarios: N=10000, parallelism 10%, per-node 0 s: 6.50 ms"},
		// Results written before the field: from the CPU and the nodes.
		{"older results", []Scenario{{Nodes: 5000, Parallelism: "unlimited", Upgraded: 5000, RolloutCPU: 30}}, false, false, "6.00 ms"},
		{"exactly 5 ms", []Scenario{{Nodes: 1000, Parallelism: "unlimited", Upgraded: 1000, RolloutCPU: 5}}, false, true, "5.00 ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := cpuPerNode(tc.ss)
			if got.NotMeasured != tc.notMeasured || got.Met != tc.met || !strings.Contains(got.Got, tc.got) {
				t.Errorf("target %+v: want not measured %t, met %t, got containing %q", got, tc.notMeasured, tc.met, tc.got)
			}
		})
	}
	found := false
	for _, tg := range Targets(Report{Scenarios: []Scenario{{Nodes: 1000, Upgraded: 1000, RolloutCPU: 9}}}) {
		found = found || (strings.Contains(tg.Name, "CPU per node upgraded") && !tg.Met)
	}
	if !found {
		t.Error("Targets does not judge the rollout's CPU per node")
	}
}
