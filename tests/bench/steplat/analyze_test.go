package steplat

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

var t0 = time.Unix(1000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// ns is a node sample: ms, state, boot ID, driver version, driver-ready,
// re-rolled.
func ns(ms int, state, boot, version string, ready, rerolled bool) NodeSample {
	return NodeSample{At: at(ms), State: state, BootID: boot, DriverVersion: version, DriverReady: ready, Rerolled: rerolled}
}

// pod is a pod of node with Ready edges up and NotReady edges down (ms);
// gone < 0: not deleted.
func pod(node string, up, down []int, gone int) *PodSample {
	p := &PodSample{Node: node, FirstSeen: at(0)}
	for _, ms := range up {
		p.ReadyAt = append(p.ReadyAt, at(ms))
	}
	for _, ms := range down {
		p.NotReadyAt = append(p.NotReadyAt, at(ms))
	}
	if gone >= 0 {
		p.GoneAt = at(gone)
	}
	return p
}

// queued is a node waiting in upgrade-required until admitted at ms by
// the write that takes it to state.
func queued(ms int, state string) []NodeSample {
	return []NodeSample{
		ns(0, "", "q1", "1", true, false),
		ns(10, "upgrade-required", "q1", "1", true, false),
		ns(ms, state, "q1", "1", true, false),
	}
}

func TestAnalyze(t *testing.T) {
	for _, tc := range []struct {
		name        string
		nodes       map[string][]NodeSample
		pods        map[string]*PodSample
		parallelism int
		want        map[Kind][]int // ms; a kind not listed must be empty
	}{{
		name: "one write per state, pods re-rolled by deletion",
		nodes: map[string][]NodeSample{
			"a": {
				ns(0, "", "b1", "1", true, false),
				ns(10, "upgrade-required", "b1", "1", true, false),
				ns(20, "cordon-required", "b1", "1", true, false),
				ns(25, "wait-for-jobs-required", "b1", "1", true, false),
				ns(30, "pod-deletion-required", "b1", "1", true, false),
				ns(35, "drain-required", "b1", "1", true, false),
				ns(40, "reboot-required", "b1", "1", true, false),
				ns(1000, "reboot-required", "b2", "1", true, false), // new boot
				ns(1004, "validation-required", "b2", "1", true, false),
				ns(1100, "validation-required", "b2", "1", false, false),
				ns(1500, "validation-required", "b2", "2", false, false),
				ns(1510, "validation-required", "b2", "2", true, false), // driver ready
				ns(1520, "validation-required", "b2", "2", true, true),  // re-rolled
				ns(1700, "uncordon-required", "b2", "2", true, true),
				ns(1705, "", "b2", "2", true, false),
			},
			"b": queued(1715, "cordon-required"), // admitted when a freed its slot
		},
		pods: map[string]*PodSample{
			"old": pod("a", []int{1}, nil, 1530),
			"new": pod("a", []int{1690}, nil, -1),
		},
		parallelism: 1,
		want: map[Kind][]int{
			Immediate: {5, 5, 5, 5, 5},
			Rebooted:  {4},
			Rerolled:  {10},
			Validated: {10},
			Admitted:  {10},
		},
	}, {
		name: "chained: none to reboot-required, validation to done, pods restarted in place",
		nodes: map[string][]NodeSample{
			"a": {
				ns(0, "", "b1", "1", true, false),
				ns(10, "reboot-required", "b1", "1", true, false), // admitted, cordoned, drained: one write
				ns(1000, "reboot-required", "b2", "1", true, false),
				ns(1003, "validation-required", "b2", "1", true, false),
				ns(1010, "validation-required", "b2", "1", false, false),
				ns(1200, "validation-required", "b2", "2", false, false),
				ns(1210, "validation-required", "b2", "2", true, false),
				ns(1260, "", "b2", "2", true, false), // validated and uncordoned: one write
			},
			"b": queued(1270, "reboot-required"),
		},
		pods: map[string]*PodSample{
			"driver":  pod("a", []int{1, 1150}, []int{1100}, -1),
			"plugin":  pod("a", []int{1, 1250}, []int{1001}, -1), // Ready again last
			"export":  pod("a", []int{1, 1240}, []int{1001}, -1),
			"other-b": pod("b", []int{1, 1255}, []int{1001}, -1), // not a's
		},
		parallelism: 1,
		want: map[Kind][]int{
			Rebooted:  {3},
			Validated: {10},
			Admitted:  {10},
		},
	}, {
		name: "driver-ready after the pods: validation waits for driver-ready",
		nodes: map[string][]NodeSample{
			"a": {
				ns(0, "reboot-required", "b1", "1", true, false),
				ns(500, "reboot-required", "b1", "1", false, false), // a change before the boot
				ns(1000, "reboot-required", "b2", "1", false, false),
				ns(1002, "validation-required", "b2", "1", false, false),
				ns(1200, "validation-required", "b2", "2", false, false),
				ns(1300, "validation-required", "b2", "2", true, false),
				ns(1307, "uncordon-required", "b2", "2", true, false),
				ns(1309, "", "b2", "2", true, false),
			},
		},
		pods: map[string]*PodSample{
			"plugin": pod("a", []int{1, 1250}, []int{1001}, -1),
		},
		want: map[Kind][]int{
			Rebooted:  {2},
			Validated: {7},
			Immediate: {2},
		},
	}, {
		name: "reboot-required straight to done: both the boot and the validation step",
		nodes: map[string][]NodeSample{
			"a": {
				ns(0, "", "b1", "1", true, false),
				ns(10, "reboot-required", "b1", "1", true, false),
				ns(1000, "reboot-required", "b2", "1", false, false),
				ns(1100, "reboot-required", "b2", "2", false, false),
				ns(1110, "reboot-required", "b2", "2", true, false),
				ns(1160, "", "b2", "2", true, false),
			},
		},
		pods: map[string]*PodSample{
			"plugin": pod("a", []int{1, 1150}, []int{1001}, -1),
		},
		want: map[Kind][]int{
			Rebooted:  {160},
			Validated: {10},
		},
	}, {
		name: "pods deleted, NotReady again or never restarted are no cause",
		nodes: map[string][]NodeSample{
			"a": {
				ns(0, "reboot-required", "b1", "1", true, false),
				ns(1000, "reboot-required", "b2", "2", true, false),
				ns(1001, "validation-required", "b2", "2", true, false),
				ns(1400, "uncordon-required", "b2", "2", true, false),
			},
		},
		pods: map[string]*PodSample{
			"restarted":  pod("a", []int{1, 1300}, []int{1001}, -1),
			"deleted":    pod("a", []int{1, 1390}, []int{1001}, 1395),
			"down-again": pod("a", []int{1, 1380}, []int{1001, 1385}, -1),
			"untouched":  pod("a", []int{1}, nil, -1),
			"later":      pod("a", []int{1, 1450}, []int{1001}, -1),
		},
		want: map[Kind][]int{
			Rebooted:  {1},
			Validated: {100},
		},
	}, {
		name: "no new boot seen: no reboot or validation latency",
		nodes: map[string][]NodeSample{
			"a": {
				ns(0, "reboot-required", "b1", "1", true, false),
				ns(500, "validation-required", "b1", "2", true, false),
				ns(600, "", "b1", "2", true, false),
			},
		},
		want: map[Kind][]int{},
	}, {
		name: "admissions within the initial parallelism wait for no budget",
		nodes: map[string][]NodeSample{
			"a": queued(20, "reboot-required"),
			"b": queued(21, "cordon-required"),
			"c": {
				ns(0, "", "c1", "1", true, false),
				ns(10, "upgrade-required", "c1", "1", true, false),
				ns(30, "upgrade-required", "c1", "1", true, false),
				ns(40, "", "c1", "1", true, false), // already up to date: neither admitted nor freeing
			},
		},
		parallelism: 2,
		want:        map[Kind][]int{Immediate: {}},
	}, {
		name: "a failed node frees its slot, an up-to-date one held none",
		nodes: map[string][]NodeSample{
			"a": append(queued(20, "validation-required"), ns(500, "upgrade-failed", "q1", "1", true, false)),
			"b": queued(510, "reboot-required"),
			"c": {
				ns(0, "", "c1", "2", true, false),
				ns(10, "upgrade-required", "c1", "2", true, false),
				ns(300, "", "c1", "2", true, false),
			},
		},
		parallelism: 1,
		want:        map[Kind][]int{Admitted: {10}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Analyze(Timelines{Nodes: tc.nodes, Pods: tc.pods}, "2", tc.parallelism)
			for _, k := range Kinds {
				g := append([]time.Duration(nil), got[k]...)
				sort.Slice(g, func(i, j int) bool { return g[i] < g[j] })
				var w []time.Duration
				for _, ms := range tc.want[k] {
					w = append(w, time.Duration(ms)*time.Millisecond)
				}
				if fmt.Sprint(g) != fmt.Sprint(w) {
					t.Errorf("%s: got %v, want %v", k, g, w)
				}
			}
			for k := range got {
				if !known(k) {
					t.Errorf("unknown kind %q", k)
				}
			}
		})
	}
}

func known(k Kind) bool {
	for _, x := range Kinds {
		if x == k {
			return true
		}
	}
	return false
}

func TestPercentile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	all := Latencies{Immediate: ms(5, 5, 5), Rebooted: ms(10), Validated: ms(7)}.All()
	if fmt.Sprint(all) != fmt.Sprint(ms(5, 5, 5, 7, 10)) {
		t.Fatalf("All() = %v", all)
	}
	if Percentile(all, 0.5) != 5*time.Millisecond || Percentile(all, 0.99) != 10*time.Millisecond || Percentile(nil, 0.5) != 0 {
		t.Errorf("p50 %s p99 %s", Percentile(all, 0.5), Percentile(all, 0.99))
	}
}
