package steplat

import (
	"fmt"
	"testing"
	"time"

	"github.com/openfuyao/npu-stack/tests/bench/inflight"
)

func TestCycles(t *testing.T) {
	nodes := map[string][]NodeSample{
		// Admitted at 100; its own steps: reboot seen at 1,000 taken at
		// 1,030 (30), validation possible at 1,500 (driver-ready) taken at
		// 1,540 (40); out of progress at 1,540.
		"a": {
			ns(0, "", "a1", "1", true, false),
			ns(10, "upgrade-required", "a1", "1", true, false),
			ns(100, "reboot-required", "a1", "1", true, false),
			ns(1000, "reboot-required", "a2", "1", false, false),
			ns(1030, "validation-required", "a2", "1", false, false),
			ns(1500, "validation-required", "a2", "2", true, false),
			ns(1540, "", "a2", "2", true, false),
		},
		// Admitted and still in progress: no cycle.
		"b": queued(200, "reboot-required"),
		// Up to date from the start: never admitted.
		"c": {ns(0, "", "c1", "2", true, false)},
	}
	cs := Cycles(Timelines{Nodes: nodes}, "2")
	if len(cs) != 1 {
		t.Fatalf("cycles %+v, want one (node a)", cs)
	}
	want := Cycle{Total: 1440 * time.Millisecond, Rollout: 70 * time.Millisecond}
	if cs[0] != want {
		t.Fatalf("cycle %+v, want %+v", cs[0], want)
	}
	m := MeanCycle([]Cycle{want, {Total: 560 * time.Millisecond, Rollout: 30 * time.Millisecond}})
	if m != (Cycle{Total: time.Second, Rollout: 50 * time.Millisecond}) {
		t.Fatalf("mean %+v", m)
	}
	if MeanCycle(nil) != (Cycle{}) {
		t.Fatal("mean of no cycles is not zero")
	}
}

// Each node is in progress from the write admitting it (out of
// upgrade-required or no state) to the write taking it out of progress;
// upgrade-failed is out of progress, as the rollout's budget counts it.
func TestInProgress(t *testing.T) {
	nodes := map[string][]NodeSample{
		"a": { // admitted at 100, done at 1,540
			ns(0, "", "a1", "1", true, false),
			ns(10, "upgrade-required", "a1", "1", true, false),
			ns(100, "reboot-required", "a1", "1", true, false),
			ns(1000, "reboot-required", "a2", "1", false, false),
			ns(1030, "validation-required", "a2", "2", false, false),
			ns(1540, "", "a2", "2", true, false),
		},
		"b": { // admitted at 200, failed at 900
			ns(0, "upgrade-required", "b1", "1", true, false),
			ns(200, "cordon-required", "b1", "1", true, false),
			ns(900, "upgrade-failed", "b1", "1", true, false),
		},
		"c": queued(1200, "reboot-required"), // still in progress at the end
		"d": {ns(0, "", "d1", "2", true, false)},
	}
	got := InProgress(Timelines{Nodes: nodes}, at(2000))
	want := fmt.Sprint([]inflight.Interval{
		{Node: "a", Start: at(100), End: at(1540)},
		{Node: "b", Start: at(200), End: at(900)},
		{Node: "c", Start: at(1200), End: at(2000)},
	})
	if fmt.Sprint(got) != want {
		t.Fatalf("InProgress = %v\nwant %v", got, want)
	}
}
