package runner

import (
	"testing"
	"time"
)

func TestScaledTimers(t *testing.T) {
	for _, c := range []struct {
		name  string
		scale float64
		want  Timers
	}{
		{"real time", 1, Timers{PlannedRequeue: 2 * time.Minute, MinRetry: 100 * time.Millisecond, MaxRetry: 3 * time.Second, PodDeletionTimeout: 300, DrainTimeout: 300}},
		{"unset is real time", 0, Timers{PlannedRequeue: 2 * time.Minute, MinRetry: 100 * time.Millisecond, MaxRetry: 3 * time.Second, PodDeletionTimeout: 300, DrainTimeout: 300}},
		{"1:30", 1.0 / 30, Timers{PlannedRequeue: 4 * time.Second, MinRetry: 3333333 * time.Nanosecond, MaxRetry: 100 * time.Millisecond, PodDeletionTimeout: 10, DrainTimeout: 10}},
		{"tiny keeps a floor", 1e-9, Timers{PlannedRequeue: time.Millisecond, MinRetry: time.Millisecond, MaxRetry: time.Millisecond, PodDeletionTimeout: 1, DrainTimeout: 1}},
	} {
		got, err := ScaledTimers(c.scale)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s: ScaledTimers(%v) = %+v, want %+v", c.name, c.scale, got, c.want)
		}
	}
	for _, bad := range []float64{-1, 2} {
		if _, err := ScaledTimers(bad); err == nil {
			t.Errorf("ScaledTimers(%v): no error", bad)
		}
	}
}

func TestPolicyTakesScaledTimeouts(t *testing.T) {
	tm, err := ScaledTimers(1.0 / 30)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Policy(2, "25%", tm)
	if err != nil {
		t.Fatal(err)
	}
	if p.PodDeletion.TimeoutSecond != 10 || p.DrainSpec.TimeoutSecond != 10 || p.MaxParallelUpgrades != 2 || p.DrainSpec.Enable {
		t.Fatalf("policy = pod deletion %+v, drain %+v, parallel %d", *p.PodDeletion, *p.DrainSpec, p.MaxParallelUpgrades)
	}
}
