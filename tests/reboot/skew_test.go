package reboot_test

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// A slot's expiry is judged by each rebooter on its own clock from when it
// saw the holder's last renewal: a holder whose clock is minutes off loses
// its slot exactly one TTL after it stopped renewing, as with agreeing
// clocks. Ahead, its renew time would otherwise keep the slot taken for
// the skew on top of the TTL; behind, the slot would look expired the
// moment it was taken and a second node would reboot at once.
func TestSlotExpiryIgnoresTheHoldersClock(t *testing.T) {
	for _, skew := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
		t.Run(fmt.Sprintf("holder clock %s", skew), func(t *testing.T) {
			t.Parallel()
			const ttl = 60 * time.Second
			ctx := ctxTimeout(t, 5*time.Minute)
			f := newFleet(t, 2, func(r, rec, _ map[string]any) {
				r["slotTTLSeconds"] = int(ttl / time.Second)
				rec["autoRecover"] = true
			})
			lost, next := f.nodes[0], f.nodes[1]
			if err := lost.Host().SetClockOffset(skew); err != nil {
				t.Fatal(err)
			}
			lost.LoseOnReboot() // goes down for the reboot and never boots again
			wedge(t, lost)
			waitNode(ctx, t, lost.Name(), "reboot recorded", func(n *corev1.Node) bool { return n.Annotations[keys.RebootFromBootID()] != "" })
			wedge(t, next)

			// On the test's clock: when the lost holder's slot record last
			// changed, and when the next node took a slot.
			var record string
			var renewed, taken time.Time
			err := testbed.WaitFor(ctx, leasesLW(f.ns), &coordinationv1.Lease{}, func(ls []*coordinationv1.Lease) (bool, error) {
				now := time.Now()
				for _, l := range ls {
					switch ptr.Deref(l.Spec.HolderIdentity, "") {
					case lost.Name():
						if r := fmt.Sprint(l.Spec.RenewTime, l.Spec.AcquireTime); r != record {
							record, renewed = r, now
						}
					case next.Name():
						taken = now
						return true, nil
					}
				}
				return false, nil
			})
			if err != nil {
				t.Fatalf("the next node never took a slot: %v", err)
			}
			if renewed.IsZero() {
				t.Fatal("never saw the lost node hold a slot")
			}
			// The watch sees the renewal a little after the rebooters may.
			t.Logf("slot taken %s after the lost holder's last renewal", taken.Sub(renewed).Round(time.Second))
			if held := taken.Sub(renewed); held < ttl-3*time.Second || held > ttl+45*time.Second {
				t.Fatalf("the lost holder's slot was taken %s after its last renewal, want its TTL %s (holder's clock off by %s)", held.Round(time.Second), ttl, skew)
			}
			waitEvent(ctx, t, next.Name(), contract.EventRebootPending, "held (by "+lost.Name()+")")
		})
	}
}
