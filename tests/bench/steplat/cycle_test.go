package steplat

import (
	"testing"
	"time"
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
