package reboot

// Maintenance windows. Each kind of reboot has one judge of its window,
// on one clock: the rollout holds upgrade reboots (contract.RebootHold)
// by its own clock, and this rebooter judges automatic recoveries
// (Policy.RecoveryWindows) by its node's. No window time is ever written
// on the Node for another machine to compare with its clock.

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/window"
)

// upgradeHeld says why an upgrade reboot the rollout holds for its
// maintenance window does not start; "" when it may (another reason, no
// hold, or approved: an approval is the operator speaking).
func upgradeHeld(n *corev1.Node, k contract.Keys, reason contract.RebootReason, approved bool) string {
	held := n.Annotations[k.RebootHold()]
	if held == "" || reason != contract.ReasonUpgrade || approved {
		return ""
	}
	return fmt.Sprintf("reboot (reason=upgrade) is held by the driver rollout (%s=%s): its maintenance window is closed and says wait (inFlight: wait); the rollout lifts the hold when the window opens. To reboot now: %s",
		k.RebootHold(), held, approveCommand(n.Name, k))
}

// recoveryWindowClosed keeps an automatic recovery reboot for its
// maintenance window: the node is cordoned and its NPU pods evicted now
// (its chips are wedged: nothing runs on them anyway), without a reboot
// slot, which a node that is not rebooting must not hold; then it waits,
// saying until when, and reboots once the window opens.
func recoveryWindowClosed(f Facts, p Policy, now, next time.Time) Action {
	k, n := p.Keys, f.Node
	if f.SlotHeld {
		return Action{Kind: ReleaseSlot, Cause: CauseWindow, Reason: contract.ReasonRecovery, Why: "recovery reboot waits for its maintenance window; give the slot back"}
	}
	if owners := k.Cordon(n.Labels, n.Annotations); !owners.Recovery {
		a := cordon(n, owners, k)
		a.Why += "; the reboot waits for its maintenance window"
		return a
	}
	st, _ := window.At(p.RecoveryWindows, now)
	return Action{Kind: Wait, Cause: CauseWindow, Until: next, Drain: true, Reason: contract.ReasonRecovery, Event: contract.EventMaintenanceWindowClosed,
		Why: fmt.Sprintf("node %s: its recovery reboot (reason=recovery) waits for the maintenance window (recoveryPolicy.maintenanceWindows): %s; the node stays cordoned with its NPU pods evicted meanwhile. To reboot now: %s",
			n.Name, st.Describe(now), approveCommand(n.Name, k))}
}

// drainWhileWaiting evicts the NPU pods of a node whose recovery reboot
// waits for its window, once per pending reboot: its chips are wedged, so
// its NPU pods do no work, and their controllers place them elsewhere
// while the node is cordoned. Pods left terminating (stuck on the wedged
// chip) are named in the log; the reboot at the opening ends them.
func (a *Agent) drainWhileWaiting(ctx context.Context, node *corev1.Node) error {
	key := a.pendingKey
	if key == "" {
		key = "pending"
	}
	if a.drainedFor == key {
		return nil
	}
	out := a.cfg.Log.WithField("step", "evict").Writer()
	left, err := EvictNPUPods(ctx, a.cfg.Client, node.Name, a.cfg.RecoveryDrainTimeout, out)
	_ = out.Close()
	if err != nil {
		return fmt.Errorf("evict the NPU pods of node %s while its recovery reboot waits for its maintenance window: %w", node.Name, err)
	}
	a.drainedFor = key
	if len(left) > 0 {
		a.cfg.Log.WithField("pods", left).Warnf("NPU pod(s) %s still terminating after %s, most likely stuck on the wedged chip; the recovery reboot at the window's opening ends them",
			strings.Join(left, ", "), a.cfg.RecoveryDrainTimeout)
	}
	return nil
}
