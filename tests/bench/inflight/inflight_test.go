package inflight

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 26, 1, 52, 18, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// obs is one observation of a node: seen at s seconds, in progress or not.
type obs struct {
	node string
	s    float64
	in   bool
}

// waves admits nodes in waves: sizes[i] nodes at start[i], each in
// progress for cycle seconds.
func waves(sizes []int, start []float64, cycle float64) []obs {
	var out []obs
	n := 0
	for i, k := range sizes {
		for range k {
			name := fmt.Sprintf("node-%d", n)
			n++
			out = append(out, obs{name, start[i], true}, obs{name, start[i] + cycle, false})
		}
	}
	return out
}

func TestSummarize(t *testing.T) {
	cases := []struct {
		name  string
		obs   []obs
		end   float64
		limit int
		want  Summary
	}{
		{
			// npu-stack in the realistic run: 10 nodes, 2 at a time, each
			// freed slot refilled at once.
			name:  "five waves of two",
			obs:   waves([]int{2, 2, 2, 2, 2}, []float64{3, 303, 603, 903, 1203}, 300),
			end:   1504,
			limit: 2,
			want:  Summary{Max: 2, MaxAt: at(3), Nodes: 10, Mean: 300 * time.Second},
		},
		{
			// The peer in the same run: its library started a third node
			// twice, so 10 nodes took four waves of its 362 s cycle.
			name:  "waves of 2, 2, 3, 3 against a limit of 2",
			obs:   waves([]int{2, 2, 3, 3}, []float64{2, 364, 726, 1088}, 362),
			end:   1451,
			limit: 2,
			want:  Summary{Max: 3, MaxAt: at(726), Over: 2 * 362 * time.Second, Nodes: 10, Mean: 362 * time.Second},
		},
		{
			name:  "no limit: nothing is over it",
			obs:   waves([]int{3}, []float64{0}, 10),
			end:   10,
			limit: 0,
			want:  Summary{Max: 3, MaxAt: at(0), Nodes: 3, Mean: 10 * time.Second},
		},
		{
			// A node freed at the instant another is admitted: half-open
			// intervals, so never two at once.
			name:  "free and admit at one instant",
			obs:   []obs{{"a", 0, true}, {"a", 5, false}, {"b", 5, true}, {"b", 9, false}},
			end:   9,
			limit: 1,
			want:  Summary{Max: 1, MaxAt: at(0), Nodes: 2, Mean: 4500 * time.Millisecond},
		},
		{
			// Observations repeated in progress (state changes between
			// in-progress states) keep one interval; a node still in
			// progress at the end counts until then.
			name:  "repeated and unfinished",
			obs:   []obs{{"a", 0, true}, {"a", 1, true}, {"b", 2, true}, {"a", 3, true}, {"a", 4, false}, {"c", 6, true}},
			end:   8,
			limit: 1,
			// a [0,4), b [2,8), c [6,8): two at once over 2-4 and 6-8.
			want: Summary{Max: 2, MaxAt: at(2), Over: 4 * time.Second, Nodes: 3, Mean: 4 * time.Second},
		},
		{
			// Seen out of progress first (upgrade-required), then
			// admitted: the interval starts at the admission.
			name:  "queued before admitted",
			obs:   []obs{{"a", 0, false}, {"a", 7, true}, {"a", 10, false}},
			end:   10,
			limit: 1,
			want:  Summary{Max: 1, MaxAt: at(7), Nodes: 1, Mean: 3 * time.Second},
		},
		{
			name:  "nothing in progress",
			obs:   []obs{{"a", 0, false}},
			end:   1,
			limit: 2,
			want:  Summary{},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var tr Tracker
			for _, o := range c.obs {
				tr.Observe(o.node, at(o.s), o.in)
			}
			got := Summarize(tr.Intervals(at(c.end)), c.limit)
			if got != c.want {
				t.Errorf("Summarize = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestCurve(t *testing.T) {
	ivs := []Interval{
		{Node: "a", Start: at(0), End: at(10)},
		{Node: "b", Start: at(0), End: at(4)},
		{Node: "c", Start: at(4), End: at(12)},
		{Node: "d", Start: at(6)},             // still in progress
		{Node: "e", Start: at(8), End: at(8)}, // in and out at once: nothing
	}
	got := Curve(ivs)
	want := []Point{{at(0), 2}, {at(6), 3}, {at(10), 2}, {at(12), 1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Curve = %v, want %v", got, want)
	}
	var b strings.Builder
	if err := WriteCurve(&b, got, at(0)); err != nil {
		t.Fatal(err)
	}
	if w := "seconds\tin_progress\n0.000\t2\n6.000\t3\n10.000\t2\n12.000\t1\n"; b.String() != w {
		t.Errorf("WriteCurve = %q, want %q", b.String(), w)
	}
}

func TestPeerInProgress(t *testing.T) {
	for state, want := range map[string]bool{
		"": false, "upgrade-done": false, "upgrade-required": false, "node-maintenance-required": false,
		"cordon-required": true, "wait-for-jobs-required": true, "pod-deletion-required": true, "drain-required": true,
		"pod-restart-required": true, "validation-required": true, "uncordon-required": true, "upgrade-failed": true,
	} {
		if got := PeerInProgress(state); got != want {
			t.Errorf("PeerInProgress(%q) = %t, want %t", state, got, want)
		}
	}
}
