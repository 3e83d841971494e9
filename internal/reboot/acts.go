package reboot

// The agent's acts on its node: taking a reboot slot, rebooting, and
// completing the reboot's bookkeeping after the boot.

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// DefaultRebootAttempts is --reboot-attempts' default
// (rebooter.rebootAttempts).
const DefaultRebootAttempts = 3

// giveUpFor is the backoff after the last allowed attempt: in effect
// never, within one rebooter process.
const giveUpFor = 100 * 365 * 24 * time.Hour

func (a *Agent) acquire(ctx context.Context, node *corev1.Node, act Action, now time.Time) (time.Duration, error) {
	res, err := a.slots.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	if res.Slot != "" {
		a.cfg.Log.WithField("slot", res.Slot).Info("took a reboot slot")
		return time.Millisecond, nil
	}
	msg := fmt.Sprintf("reboot (reason=%s) waits for a reboot slot: all %d are held (by %s); --slots sets how many nodes reboot at once",
		reasonText(act.Reason), a.cfg.Slots, strings.Join(res.Holders, ", "))
	if msg != a.lastSlotMsg {
		a.lastSlotMsg, a.lastCause = msg, CauseNone
		a.cfg.Log.Info(msg)
		a.cfg.Recorder.Node(node, false, contract.EventRebootPending, "%s", msg)
	}
	// The lease watch wakes us when a slot is released; the timer covers
	// a holder that never comes back and lets its slot expire.
	return max(res.NextExpiry.Sub(now)+time.Second, time.Second), nil
}

// reboot evicts (recovery), records and runs the reboot command.
func (a *Agent) reboot(ctx context.Context, node *corev1.Node, act Action) (time.Duration, error) {
	res, err := a.slots.Acquire(ctx) // re-check and renew against the API server, not the cache
	if err != nil {
		return 0, err
	}
	if res.Slot == "" {
		return time.Second, nil
	}
	if act.Drain {
		// Never longer than half the slot's TTL: the slot taken for this
		// reboot must not expire while the drain waits.
		timeout := min(a.cfg.RecoveryDrainTimeout, a.cfg.SlotTTL/2)
		a.cfg.Log.Infof("evicting NPU pods (timeout %s)", timeout)
		out := a.cfg.Log.WithField("step", "evict").Writer()
		left, err := EvictNPUPods(ctx, a.cfg.Client, node.Name, timeout, out)
		_ = out.Close()
		if err != nil {
			a.fail(ctx, node, act.Reason, err)
			return a.retryAt.Sub(a.cfg.Clock.Now()), nil
		}
		if len(left) > 0 {
			msg := fmt.Sprintf("recovery of node %s: NPU pod(s) %s still terminating after %s (--recovery-drain-timeout, recoveryPolicy.drainTimeoutSeconds), most likely stuck on the wedged chip; rebooting anyway, which ends them",
				node.Name, strings.Join(left, ", "), timeout)
			a.cfg.Log.WithField("pods", left).Warn(msg)
			a.cfg.Recorder.Node(node, true, contract.EventRecoveryDrainTimedOut, "%s", msg)
		}
	}
	if act.Record {
		// Eviction may have taken a while and the cache may lag: decide
		// again on the node as the API server has it now, and write at
		// that resourceVersion.
		fresh, err := a.cfg.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return 0, fmt.Errorf("get node %s before recording its reboot: %w", node.Name, err)
		}
		now := a.cfg.Clock.Now()
		f, err := a.facts(ctx, fresh)
		if err != nil {
			return 0, err
		}
		f.SlotHeld = true // just renewed above
		again := Decide(f, a.cfg.Policy, now)
		if again.Kind != Reboot || !again.Record {
			return time.Millisecond, nil // the node changed meanwhile
		}
		announced, err := a.announce(ctx, fresh, f, act.Reason, now)
		if err != nil {
			a.cfg.Log.WithError(err).Warn("cannot check for the RebootRequired event")
		}
		if !announced && now.Before(a.pendingSince.Add(announceGrace+announceVisible)) {
			return time.Second, nil
		}
		change := kube.NodeChange{Annotations: map[string]*string{
			a.keys.RebootFromBootID(): kube.Set(f.BootID),
			a.keys.RebootStartedAt():  kube.Set(now.UTC().Format(time.RFC3339)),
			// Earlier reboots judged, this one added with its purpose.
			a.keys.RebootHistory(): kube.Set(again.History.String()),
			// The requester may clear reboot-reason before completion.
			a.keys.RebootStartedReason(): kube.Set(string(act.Reason)),
		}}
		if act.ConsumeApproval {
			change.Annotations[a.keys.ApproveReboot()] = nil
		}
		if _, err := kube.PatchNodeIf(ctx, a.cfg.Client, fresh.Name, fresh.ResourceVersion, change); err != nil {
			return conflictRetry(err, fmt.Errorf("record the reboot of node %s: %w", fresh.Name, err))
		}
		node = fresh
	}
	method := a.method()
	a.cfg.Recorder.Node(node, false, contract.EventRebooting, "rebooting node %s (reason=%s, method %s, boot ID %s)", node.Name, reasonText(act.Reason), method, a.mustBootID())
	a.cfg.Log.WithField("method", method).Info("running the reboot command")
	if err := a.cfg.Host.Reboot(ctx, method); err != nil {
		a.fail(ctx, node, act.Reason, fmt.Errorf("reboot command (method %s): %w", method, err))
		return a.retryAt.Sub(a.cfg.Clock.Now()), nil
	}
	a.issuedAt = a.cfg.Clock.Now()
	return a.cfg.Policy.IssueTimeout, nil
}

func (a *Agent) mustBootID() string {
	id, err := a.cfg.Host.BootID()
	if err != nil {
		return "unknown"
	}
	return id
}

// method is the reboot method of the next attempt: --method, and once it
// has failed --reboot-attempts times, --fallback-method if set.
func (a *Agent) method() host.RebootMethod {
	if a.cfg.FallbackMethod != "" && a.failures >= a.cfg.RebootAttempts {
		return a.cfg.FallbackMethod
	}
	return a.cfg.Method
}

// fail reports a failed attempt, gives the slot back and backs off. After
// --reboot-attempts failures it tries --fallback-method at once if set;
// when that fails too, or without one, it stops trying and says so on the
// node with the fix.
func (a *Agent) fail(ctx context.Context, node *corev1.Node, reason contract.RebootReason, cause error) {
	backoff := minBackoff << min(a.failures, 5)
	backoff = min(backoff, maxBackoff)
	used := a.method()
	a.failures++
	now := a.cfg.Clock.Now()
	a.retryAt, a.issuedAt = now.Add(backoff), time.Time{}
	switch {
	case used != a.method(): // the primary method is spent, the fallback is next
		a.retryAt = now
		msg := fmt.Sprintf("reboot of node %s (reason=%s) with --method=%s failed %d times (--reboot-attempts=%d), the last: %v; trying --fallback-method=%s now",
			node.Name, reasonText(reason), used, a.failures, a.cfg.RebootAttempts, cause, a.method())
		a.cfg.Log.WithError(cause).Warn(msg)
		a.cfg.Recorder.Node(node, true, contract.EventRebootFailed, "%s", msg)
	case a.failures >= a.cfg.RebootAttempts:
		// Far enough never to come in this process: the decision waits
		// for the backoff, with the slot released; a restarted rebooter
		// (its memory gone) tries again.
		a.retryAt = now.Add(giveUpFor)
		msg := a.giveUpMessage(node, reason, used, cause)
		a.cfg.Log.WithError(cause).Error(msg)
		a.cfg.Recorder.Node(node, true, contract.EventRebootFailed, "%s", msg)
	default:
		a.cfg.Log.WithError(cause).Warnf("reboot attempt %d of %d failed; retrying in %s", a.failures, a.cfg.RebootAttempts, backoff)
		a.cfg.Recorder.Node(node, true, contract.EventRebootFailed, "reboot of node %s (reason=%s) failed (attempt %d of %d): %v; slot released, retrying in %s",
			node.Name, reasonText(reason), a.failures, a.cfg.RebootAttempts, cause, backoff)
	}
	if err := a.slots.Release(ctx); err != nil {
		a.cfg.Log.WithError(err).Warn("release the reboot slot after a failure")
	}
}

// giveUpMessage names the node, what failed, the fix and the node's
// cordon, which stays: a node wanting a reboot it cannot get must not take
// new work silently, nor stay cordoned without a word.
func (a *Agent) giveUpMessage(node *corev1.Node, reason contract.RebootReason, used host.RebootMethod, cause error) string {
	fix := "fix the cause above (see docs/troubleshooting.md)"
	if pe, ok := host.IsProblem(cause); ok && pe.Fix != "" {
		fix = pe.Fix
	}
	cordon := ""
	if node.Spec.Unschedulable {
		cordon = fmt.Sprintf(" Node %s stays cordoned while its reboot is pending; `kubectl uncordon %s` lets it take pods again without the reboot.", node.Name, node.Name)
	}
	tried := fmt.Sprintf("--method=%s failed %d times (--reboot-attempts=%d)", a.cfg.Method, a.cfg.RebootAttempts, a.cfg.RebootAttempts)
	if used != a.cfg.Method {
		tried += fmt.Sprintf(", then --fallback-method=%s failed", used)
	}
	return fmt.Sprintf("reboot of node %s (reason=%s): %s; the rebooter stops trying. Last error: %v. Fix: %s; then delete the npu-rebooter pod on node %s (kubectl -n %s delete pod -l app.kubernetes.io/component=rebooter --field-selector spec.nodeName=%s) to try again.%s",
		node.Name, reasonText(reason), tried, cause, fix, node.Name, a.cfg.Namespace, node.Name, cordon)
}

func (a *Agent) complete(ctx context.Context, node *corev1.Node, act Action) (time.Duration, error) {
	from := node.Annotations[a.keys.RebootFromBootID()]
	change := kube.NodeChange{
		Labels: map[string]*string{a.keys.RebootRequired(): nil},
		Annotations: map[string]*string{
			a.keys.RebootReason():        nil,
			a.keys.RebootFromBootID():    nil,
			a.keys.RebootStartedAt():     nil,
			a.keys.RebootStartedReason(): nil,
			// The rollout reads this to know the reboot it asked for
			// happened while the kubelet may still report the old boot ID.
			a.keys.RebootedFromBootID(): kube.Set(from),
		},
	}
	if _, err := kube.PatchNodeIf(ctx, a.cfg.Client, node.Name, node.ResourceVersion, change); err != nil {
		return conflictRetry(err, fmt.Errorf("clear the reboot marker of node %s after its reboot: %w", node.Name, err))
	}
	if err := a.slots.Release(ctx); err != nil {
		return 0, err
	}
	took := ""
	if started, err := time.Parse(time.RFC3339, node.Annotations[a.keys.RebootStartedAt()]); err == nil {
		took = fmt.Sprintf(" in %s", a.cfg.Clock.Since(started).Round(time.Second))
	}
	next := ""
	if act.Reason == contract.ReasonRecovery {
		next = fmt.Sprintf("; the node stays cordoned until %s=true", a.keys.DriverReady())
	}
	a.cfg.Recorder.Node(node, false, contract.EventRebootCompleted, "node %s rebooted%s (reason=%s, boot ID %s -> %s); reboot marker cleared, slot released%s",
		node.Name, took, reasonText(act.Reason), from, a.mustBootID(), next)
	a.metrics.completed(act.Reason)
	a.resetPending()
	return 0, nil
}
