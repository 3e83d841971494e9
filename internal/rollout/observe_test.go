package rollout

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestObserverKeepsFirstSightUntilTheStepChanges(t *testing.T) {
	node := func(state, since, from string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a",
			Labels:      map[string]string{keys.UpgradeState(): state},
			Annotations: map[string]string{keys.UpgradeSince(): since, keys.RebootFromBootID(): from}}}
	}
	var o observer
	t0 := now
	steps := []struct {
		node              *corev1.Node
		at                time.Duration
		stateAt, rebootAt time.Duration
	}{
		{node("reboot-required", "2030-01-01T00:00:00Z", ""), 0, 0, 0},
		{node("reboot-required", "2030-01-01T00:00:00Z", ""), time.Minute, 0, 0},
		{node("reboot-required", "2030-01-01T00:00:00Z", "boot-a"), 2 * time.Minute, 0, 2 * time.Minute},
		{node("reboot-required", "2030-01-01T00:00:00Z", "boot-a"), 5 * time.Minute, 0, 2 * time.Minute},
		// A new since (the same state written again) is a new step.
		{node("reboot-required", "2030-01-01T00:09:00Z", "boot-a"), 6 * time.Minute, 6 * time.Minute, 2 * time.Minute},
		{node("validation-required", "1999-01-01T00:00:00Z", ""), 7 * time.Minute, 7 * time.Minute, 7 * time.Minute},
	}
	for i, st := range steps {
		seen := o.observe([]*corev1.Node{st.node}, keys, t0.Add(st.at))["a"]
		if !seen.StateAt.Equal(t0.Add(st.stateAt)) || !seen.RebootAt.Equal(t0.Add(st.rebootAt)) {
			t.Fatalf("step %d: state seen at %s, reboot at %s; want +%s, +%s", i, seen.StateAt.Sub(t0), seen.RebootAt.Sub(t0), st.stateAt, st.rebootAt)
		}
	}
	if got := o.observe(nil, keys, t0.Add(time.Hour)); len(got) != 0 || len(o.seen) != 0 {
		t.Fatal("nodes gone from the list must be forgotten")
	}
}

func TestViewTakesOnlyObservationsOfTheCurrentStep(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a",
		Labels:      map[string]string{keys.UpgradeState(): "reboot-required"},
		Annotations: map[string]string{keys.UpgradeSince(): "x", keys.RebootFromBootID(): "boot-a"}}}
	at := now.Add(-time.Hour)
	for name, tc := range map[string]struct {
		seen              Seen
		stateSeen, reboot bool
	}{
		"current":      {Seen{State: "reboot-required", Since: "x", StateAt: at, RebootFrom: "boot-a", RebootAt: at}, true, true},
		"other state":  {Seen{State: "drain-required", Since: "x", StateAt: at, RebootFrom: "boot-a", RebootAt: at}, false, true},
		"other since":  {Seen{State: "reboot-required", Since: "y", StateAt: at, RebootFrom: "boot-a", RebootAt: at}, false, true},
		"other reboot": {Seen{State: "reboot-required", Since: "x", StateAt: at, RebootFrom: "boot-0", RebootAt: at}, true, false},
	} {
		t.Run(name, func(t *testing.T) {
			v := BuildSnapshot(Inputs{Nodes: []*corev1.Node{n}, Seen: map[string]Seen{"a": tc.seen}}, View{Keys: keys}).Nodes[0]
			if got := !v.StateSeen.IsZero(); got != tc.stateSeen {
				t.Errorf("state seen taken: %t, want %t", got, tc.stateSeen)
			}
			if got := !v.RebootSeen.IsZero(); got != tc.reboot {
				t.Errorf("reboot seen taken: %t, want %t", got, tc.reboot)
			}
		})
	}
}
