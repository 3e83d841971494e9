package slots

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func lease(name, holder string, renewedAgo time.Duration, ttl int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To(ttl)}}
	if holder != "" {
		l.Spec.HolderIdentity = ptr.To(holder)
		rt := metav1.NewMicroTime(t0.Add(-renewedAgo))
		l.Spec.RenewTime = &rt
	}
	return l
}

func TestFree(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    *coordinationv1.Lease
		free bool
	}{
		{"never held", lease("reboot-slot-0", "", 0, 60), true},
		{"held and fresh", lease("reboot-slot-0", "a", 10*time.Second, 60), false},
		{"holder gone past its TTL", lease("reboot-slot-0", "a", 61*time.Second, 60), true},
		{"exactly at the TTL", lease("reboot-slot-0", "a", 60*time.Second, 60), true},
		{"held without a renew time", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a")}}, true},
	} {
		if got := Free(tc.l, t0); got != tc.free {
			t.Errorf("%s: Free = %v, want %v", tc.name, got, tc.free)
		}
	}
}

func TestHeldBy(t *testing.T) {
	s, err := New(Config{Namespace: "ns", Count: 2, TTL: time.Minute, Holder: "a", Clock: clocktesting.NewFakePassiveClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		leases []*coordinationv1.Lease
		held   bool
	}{
		{"none", nil, false},
		{"ours", []*coordinationv1.Lease{lease("reboot-slot-1", "a", time.Second, 60)}, true},
		{"someone else's", []*coordinationv1.Lease{lease("reboot-slot-0", "b", time.Second, 60)}, false},
		// Written two minutes ago by a clock that may be off: first seen
		// now, so held for a TTL from now.
		{"ours, renew time old by the writer's clock", []*coordinationv1.Lease{lease("reboot-slot-0", "a", 2*time.Minute, 60)}, true},
		{"ours beyond the slot count", []*coordinationv1.Lease{lease("reboot-slot-2", "a", time.Second, 60)}, false},
	} {
		if got := s.Held(tc.leases); got != tc.held {
			t.Errorf("%s: Held = %v, want %v", tc.name, got, tc.held)
		}
	}
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []Config{
		{Namespace: "ns", Count: 0, TTL: time.Minute, Holder: "a"},
		{Namespace: "ns", Count: 1, TTL: 0, Holder: "a"},
		{Namespace: "", Count: 1, TTL: time.Minute, Holder: "a"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// A slot's expiry is judged on the observer's clock from when it first saw
// the holder's current renewal, whatever time the holder wrote: with the
// holder's clock hours off, the slot frees exactly a TTL after the last
// renewal seen. (Pure: the compare-and-swap on the API server is tested on
// the control plane, tests/reboot.)
func TestExpiryIsMeasuredOnTheObserversClock(t *testing.T) {
	for _, skew := range []time.Duration{0, -time.Hour, time.Hour, -10 * time.Minute, 10 * time.Minute} {
		t.Run(skew.String(), func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			held := lease(Name(0), "b", -skew, 60) // renewed "now" by b's clock, which is skew ahead
			s, err := New(Config{Namespace: "ns", Count: 1, TTL: time.Minute, Holder: "a", Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			steps := []struct {
				after time.Duration
				renew bool
				free  bool
			}{
				{0, false, false},
				{59 * time.Second, false, false},
				{0, true, false}, // b renews (its clock still skewed), a sees it: a full TTL again
				{59 * time.Second, false, false},
				{time.Second, false, true},
			}
			for i, st := range steps {
				clk.Step(st.after)
				if st.renew {
					rt := metav1.NewMicroTime(clk.Now().Add(skew))
					held.Spec.RenewTime = &rt
				}
				s.mu.Lock()
				free := s.free(held, clk.Now())
				s.mu.Unlock()
				if free != st.free {
					t.Fatalf("step %d (+%s): slot free %t, want %t", i, clk.Since(t0), free, st.free)
				}
			}
		})
	}
}

func TestOwnSlotLivesATTLFromItsOwnWrite(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s, err := New(Config{Namespace: "ns", Count: 1, TTL: time.Minute, Holder: "a", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	// Written by a's own clock an hour off: the write is seen when made.
	l := lease(Name(0), "a", time.Hour, 60)
	s.wrote(l, clk.Now())
	clk.Step(59 * time.Second)
	if !s.Held([]*coordinationv1.Lease{l}) {
		t.Fatal("own slot must be held within its TTL of the write")
	}
	clk.Step(time.Second)
	if s.Held([]*coordinationv1.Lease{l}) {
		t.Fatal("own slot not renewed for its TTL must not count as held")
	}
}
