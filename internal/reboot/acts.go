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
	"github.com/openfuyao/npu-stack/internal/kube"
)

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
		f, err := a.facts(fresh)
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
	a.cfg.Recorder.Node(node, false, contract.EventRebooting, "rebooting node %s (reason=%s, method %s, boot ID %s)", node.Name, reasonText(act.Reason), a.cfg.Method, a.mustBootID())
	a.cfg.Log.WithField("method", a.cfg.Method).Info("running the reboot command")
	if err := a.cfg.Host.Reboot(ctx, a.cfg.Method); err != nil {
		a.fail(ctx, node, act.Reason, fmt.Errorf("reboot command (--method=%s): %w", a.cfg.Method, err))
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

// fail reports a failed attempt, gives the slot back and backs off.
func (a *Agent) fail(ctx context.Context, node *corev1.Node, reason contract.RebootReason, cause error) {
	backoff := minBackoff << min(a.failures, 5)
	backoff = min(backoff, maxBackoff)
	a.failures++
	now := a.cfg.Clock.Now()
	a.retryAt, a.issuedAt = now.Add(backoff), time.Time{}
	a.cfg.Log.WithError(cause).Warnf("reboot attempt failed; retrying in %s", backoff)
	a.cfg.Recorder.Node(node, true, contract.EventRebootFailed, "reboot of node %s (reason=%s) failed: %v; slot released, retrying in %s", node.Name, reasonText(reason), cause, backoff)
	if err := a.slots.Release(ctx); err != nil {
		a.cfg.Log.WithError(err).Warn("release the reboot slot after a failure")
	}
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
