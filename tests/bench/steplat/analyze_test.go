package steplat

import (
	"testing"
	"time"
)

func TestAnalyze(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	node := func(ms int, state, boot, version string, ready, rerolled bool) NodeSample {
		return NodeSample{At: at(ms), State: state, BootID: boot, DriverVersion: version, DriverReady: ready, Rerolled: rerolled}
	}
	tl := Timelines{
		Nodes: map[string][]NodeSample{
			"a": {
				node(0, "", "b1", "1", true, false),
				node(10, "upgrade-required", "b1", "1", true, false),
				node(20, "cordon-required", "b1", "1", true, false),
				node(25, "wait-for-jobs-required", "b1", "1", true, false),
				node(30, "pod-deletion-required", "b1", "1", true, false),
				node(35, "drain-required", "b1", "1", true, false),
				node(40, "reboot-required", "b1", "1", true, false),
				node(1000, "reboot-required", "b2", "1", true, false), // new boot
				node(1004, "validation-required", "b2", "1", true, false),
				node(1100, "validation-required", "b2", "1", false, false),
				node(1500, "validation-required", "b2", "2", false, false),
				node(1510, "validation-required", "b2", "2", true, false), // driver ready
				node(1520, "validation-required", "b2", "2", true, true),  // re-rolled
				node(1700, "uncordon-required", "b2", "2", true, true),
				node(1705, "", "b2", "2", true, false),
			},
			"b": {
				node(0, "", "c1", "1", true, false),
				node(10, "upgrade-required", "c1", "1", true, false),
				node(1715, "cordon-required", "c1", "1", true, false), // admitted when a freed its slot
			},
		},
		Pods: map[string]*PodSample{
			"old": {Node: "a", FirstSeen: at(0), ReadyAt: at(1)},
			"new": {Node: "a", FirstSeen: at(1600), ReadyAt: at(1690)},
		},
	}
	got := Analyze(tl, "2", 1)
	want := map[Kind][]time.Duration{
		Immediate:   {5, 5, 5, 5, 5},
		Rebooted:    {4},
		DriverReady: {10},
		PodsReady:   {10},
		Admitted:    {10},
	}
	for k, w := range want {
		g := got[k]
		if len(g) != len(w) {
			t.Errorf("%s: got %v, want %v ms", k, g, w)
			continue
		}
		for i := range w {
			if g[i] != w[i]*time.Millisecond {
				t.Errorf("%s[%d] = %s, want %dms", k, i, g[i], w[i])
			}
		}
	}
	all := got.All()
	if Percentile(all, 0.5) != 5*time.Millisecond || Percentile(all, 0.99) != 10*time.Millisecond {
		t.Errorf("p50 %s p99 %s", Percentile(all, 0.5), Percentile(all, 0.99))
	}
}
