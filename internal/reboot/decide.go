// Package reboot is the per-node reboot agent (docs/architecture.md,
// "Reboot protocol"): a pure
// decision (Decide: node snapshot + host facts + policy + time → the next
// action and why) and the Agent that carries actions out against the API
// server and the host.
//
// All progress lives on the Node, so the sequence is crash-safe: any step
// may be killed and rerun from node state alone. The pivot is the
// RebootFromBootID annotation, written (with the start time, the history
// entry with the reboot's purpose and the consumed approval, in one patch)
// before the reboot command: present with the current boot ID means the
// reboot was decided and recorded and only the command may need
// repeating; present with another boot ID means it happened. The loop
// guard counts only the recorded reboots that did not achieve their
// purpose (judge.go).
package reboot

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/openfuyao/npu-stack/internal/budget"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/window"
)

// Policy is the rebooter's configuration, from its flags.
type Policy struct {
	Keys contract.Keys
	// AutoUpgrade and AutoRecover authorise reboots of reason upgrade and
	// recovery without an approval.
	AutoUpgrade bool
	AutoRecover bool
	// MaxWedgedNodes (count or percentage of the NPU nodes): with more
	// nodes than this waiting for a recovery reboot, automatic recovery
	// pauses, since a fleet-wide fault is not fixed by rebooting it all.
	MaxWedgedNodes intstr.IntOrString
	// UptimeGuard: no reboot within this long of boot.
	UptimeGuard time.Duration
	Budget      budget.Budget
	// IssueTimeout is how long the machine may take to go down after the
	// reboot command returned before the command counts as failed.
	IssueTimeout time.Duration
	// RecoveryWindows are the maintenance windows of automatic recovery
	// reboots, judged on this node's clock (none: any time). Outside them
	// a wedged node is cordoned and its NPU pods evicted, and the reboot
	// waits for the opening. An approval is not bound by them; upgrade
	// reboots are the rollout's to hold (contract.RebootHold).
	RecoveryWindows window.Schedule
}

// Fleet is what the storm protection needs to know about the NPU nodes.
type Fleet struct {
	NPUNodes int
	// Wedged counts NPU nodes with reboot-required=true and reason
	// recovery, this one included.
	Wedged int
}

// Facts are everything Decide looks at besides the policy and the time.
type Facts struct {
	Node   *corev1.Node
	BootID string
	Uptime time.Duration
	// SlotHeld: this node holds a live reboot slot (cached view).
	SlotHeld bool
	Fleet    Fleet
	// IssuedAt is when this process last ran the reboot command (zero if
	// it has not): a fresh process repeats a decided reboot, the process
	// that ran it waits for the machine to go down.
	IssuedAt time.Time
	// RetryAt is the end of the backoff after a failure.
	RetryAt time.Time
}

// Kind is what to do next.
type Kind int

const (
	// Idle: nothing pending; wait for the node to change.
	Idle Kind = iota
	// Wait for Cause, until Until (zero: until something changes).
	Wait
	// AcquireSlot before going further.
	AcquireSlot
	// ReleaseSlot held without a reboot in flight.
	ReleaseSlot
	// Cordon for a recovery reboot, remembering whether it was cordoned.
	Cordon
	// Reboot: (for recovery, evict NPU pods first,) record the bookkeeping
	// unless already recorded, then run the reboot command.
	Reboot
	// Fail: the reboot command returned but the machine never went down.
	Fail
	// Complete: the boot ID changed; clear the marker, release the slot.
	Complete
	// Uncordon after a recovery once the driver is ready again.
	Uncordon
	// Settle writes History: past reboots judged by what they achieved.
	Settle
)

var kindNames = map[Kind]string{Idle: "idle", Wait: "wait", AcquireSlot: "acquire-slot", ReleaseSlot: "release-slot",
	Cordon: "cordon", Reboot: "reboot", Fail: "fail", Complete: "complete", Uncordon: "uncordon", Settle: "settle"}

func (k Kind) String() string { return kindNames[k] }

// Cause is what a Wait waits for.
type Cause string

const (
	CauseNone        Cause = ""
	CauseApproval    Cause = "approval"
	CauseStorm       Cause = "storm"
	CauseBudget      Cause = "budget"
	CauseBadHistory  Cause = "bad-history"
	CauseUptime      Cause = "uptime-guard"
	CauseBackoff     Cause = "backoff"
	CauseGoingDown   Cause = "going-down"
	CauseDriverReady Cause = "driver-ready"
	// CauseDriverInstall: the node is in the rollout's reboot-required and
	// its driver pod has not yet installed the upgrade's target version,
	// so the reboot would load the old driver again.
	CauseDriverInstall Cause = "driver-install"
	// CauseWindow: an automatic recovery reboot waits for its maintenance
	// window, or the rollout holds an upgrade reboot for its own.
	CauseWindow Cause = "maintenance-window"
)

// causes are every Cause a Wait can carry: the metrics expose each one
// (at 0 when it does not apply), so a series exists before it first fires.
func causes() []Cause {
	return []Cause{CauseApproval, CauseStorm, CauseBudget, CauseBadHistory, CauseUptime, CauseBackoff,
		CauseGoingDown, CauseDriverReady, CauseDriverInstall, CauseWindow}
}

// Action is Decide's answer.
type Action struct {
	Kind  Kind
	Cause Cause
	// Why explains the action to a human (logs and events).
	Why   string
	Until time.Time
	// Event is the event a Wait announces (once per cause), "" for none.
	Event   contract.EventReason
	Warning bool
	Reason  contract.RebootReason
	// For Reboot.
	Record          bool // write the bookkeeping (false: already recorded)
	Drain           bool // evict NPU pods first (recovery; for Wait: evict, then wait)
	ConsumeApproval bool // remove the approval in the same patch
	// For Cordon: record that an admin had cordoned the node before.
	// For Uncordon: leave the node cordoned (an admin cordoned it, or the
	// rollout still holds it) and only let go of the recovery's hold.
	AdminCordoned bool
	KeepCordoned  bool
	// History is the loop guard's annotation to write: for Reboot with
	// Record, the judged history with this reboot's entry added; for
	// Settle, the history with past reboots judged.
	History budget.History
}

// Decide picks the next step of the reboot protocol.
func Decide(f Facts, p Policy, now time.Time) Action {
	k := p.Keys
	n := f.Node
	reason := contract.RebootReason(n.Annotations[k.RebootReason()])
	if from := n.Annotations[k.RebootFromBootID()]; from != "" {
		if r := n.Annotations[k.RebootStartedReason()]; r != "" {
			reason = contract.RebootReason(r)
		}
		return decideIssued(f, p, now, from, reason)
	}
	pending := n.Labels[k.RebootRequired()] == contract.True
	if !pending {
		if f.SlotHeld {
			return Action{Kind: ReleaseSlot, Why: "no reboot pending"}
		}
		if a, ok := settle(n, k); ok {
			return a
		}
		if owners := k.Cordon(n.Labels, n.Annotations); owners.Recovery {
			if n.Labels[k.DriverReady()] != contract.True {
				return Action{Kind: Wait, Cause: CauseDriverReady, Why: fmt.Sprintf("recovery reboot done; node stays cordoned until %s=true", k.DriverReady())}
			}
			return uncordon(owners, k)
		}
		return Action{Kind: Idle, Why: "no reboot pending"}
	}

	// Until the slot is taken, every wait gives back a slot still held
	// from an earlier attempt: a node waiting must not block the fleet.
	wait := func(a Action) Action {
		a.Kind, a.Reason = Wait, reason
		if f.SlotHeld {
			return Action{Kind: ReleaseSlot, Cause: a.Cause, Why: "not ready to reboot: " + a.Why, Reason: reason}
		}
		return a
	}
	history, err := budget.Parse(n.Annotations[k.RebootHistory()])
	if err != nil {
		return wait(Action{Cause: CauseBadHistory, Event: contract.EventRebootRefused, Warning: true,
			Why: fmt.Sprintf("refusing to reboot node %s: the loop guard cannot read its history (annotation %s): %v; fix or remove it: %s", n.Name, k.RebootHistory(), err, resetCommand(n.Name, k))})
	}
	// A new reboot is asked for: every earlier one that has not shown by
	// now that it worked failed.
	history, _ = judge(history, n, k, true)
	if loop := p.Budget.Loop(history); loop != nil {
		return wait(Action{Cause: CauseBudget, Event: contract.EventRebootRefused, Warning: true,
			Why: fmt.Sprintf("refusing to reboot node %s (reason=%s): loop guard, %s within %s did not achieve their purpose (%s); find out why reboots do not fix it, then reset the loop guard: %s",
				n.Name, reasonText(reason), countLoop(loop), p.Budget.Window, describeLoop(loop), resetCommand(n.Name, k))})
	}

	approved := n.Annotations[k.ApproveReboot()] == contract.True
	auto, storm := false, false
	switch reason {
	case contract.ReasonUpgrade:
		auto = p.AutoUpgrade
	case contract.ReasonRecovery:
		if p.AutoRecover {
			limit, err := intstr.GetScaledValueFromIntOrPercent(&p.MaxWedgedNodes, f.Fleet.NPUNodes, true)
			storm = err == nil && f.Fleet.Wedged > limit
			if err != nil {
				// An unreadable limit is checked at startup; pausing is
				// the safe reading should one get here anyway.
				storm = true
			}
			auto = !storm
		}
	}
	if !auto && !approved {
		if storm {
			return wait(Action{Cause: CauseStorm, Event: contract.EventRecoveryPaused, Warning: true,
				Why: fmt.Sprintf("automatic recovery paused: %d of %d NPU nodes wait for a recovery reboot, more than --max-wedged-nodes=%s; a fleet-wide fault is not fixed by rebooting the fleet. Approve this node by hand if a reboot helps: %s",
					f.Fleet.Wedged, f.Fleet.NPUNodes, p.MaxWedgedNodes.String(), approveCommand(n.Name, k))})
		}
		if v, set := n.Annotations[k.ApproveReboot()]; set {
			// A value other than "true" looks like an approval to whoever
			// wrote it: say loudly that it is none.
			return wait(Action{Cause: CauseApproval, Event: contract.EventApprovalInvalid, Warning: true,
				Why: fmt.Sprintf("reboot (reason=%s) waits for approval: %s=%q is not an approval, only \"true\" is: %s --overwrite",
					reasonText(reason), k.ApproveReboot(), v, approveCommand(n.Name, k))})
		}
		return wait(Action{Cause: CauseApproval, Event: contract.EventRebootPending,
			Why: fmt.Sprintf("reboot (reason=%s) waits for approval: %s", reasonText(reason), approveCommand(n.Name, k))})
	}
	if why := upgradeHeld(n, k, reason, approved); why != "" {
		return wait(Action{Cause: CauseWindow, Event: contract.EventRebootPending, Why: why})
	}
	if reason == contract.ReasonRecovery && auto && !approved {
		if open, next := window.Open(p.RecoveryWindows, now); !open {
			return recoveryWindowClosed(f, p, now, next)
		}
	}
	if why := installPending(n, k); why != "" {
		return wait(Action{Cause: CauseDriverInstall, Event: contract.EventRebootPending, Why: fmt.Sprintf("reboot (reason=%s) %s", reasonText(reason), why)})
	}
	if f.Uptime < p.UptimeGuard {
		left := p.UptimeGuard - f.Uptime
		return wait(Action{Cause: CauseUptime, Event: contract.EventRebootPending, Until: now.Add(left),
			Why: fmt.Sprintf("reboot (reason=%s) waits for the uptime guard: up %s, no reboot within %s of boot, %s left (rebooter.uptimeGuardMinutes)",
				reasonText(reason), f.Uptime.Round(time.Second), p.UptimeGuard, left.Round(time.Second))})
	}
	if now.Before(f.RetryAt) {
		return wait(Action{Cause: CauseBackoff, Until: f.RetryAt,
			Why: fmt.Sprintf("reboot (reason=%s) retries after the last failure at %s", reasonText(reason), f.RetryAt.UTC().Format(time.RFC3339))})
	}
	if !f.SlotHeld {
		return Action{Kind: AcquireSlot, Reason: reason, Why: "authorised; needs a reboot slot"}
	}
	if owners := k.Cordon(n.Labels, n.Annotations); reason == contract.ReasonRecovery && !owners.Recovery {
		return cordon(n, owners, k)
	}
	// An approval is good for the node's next reboot, whoever authorised
	// it: spend it now so that it cannot authorise a later one.
	entry := entryFor(n, k, reason, now)
	return Action{Kind: Reboot, Reason: reason, Record: true, Drain: reason == contract.ReasonRecovery, ConsumeApproval: approved,
		History: p.Budget.Record(history, entry),
		Why:     fmt.Sprintf("reboot (reason=%s, for %s) authorised by %s", reasonText(reason), entry.Purpose(), authority(auto, reason))}
}

// installPending says why a node in the rollout's reboot-required must
// not reboot yet: its driver pod (which records installed-driver-version)
// has not installed the upgrade's target, so the boot would load
// the old driver again. "" when the reboot may go ahead: no upgrade in
// reboot-required, no driver pod managing the driver (no installed-version
// record), or the target installed. A target already loaded is no
// exception: the disk may hold another version (installed before a
// rollback), which the boot would load.
func installPending(n *corev1.Node, k contract.Keys) string {
	target := n.Annotations[k.UpgradeTarget()]
	installed, managed := n.Annotations[k.InstalledDriver()]
	if n.Labels[k.UpgradeState()] != string(contract.StateRebootRequired) || !managed || target == "" || installed == target {
		return ""
	}
	return fmt.Sprintf("waits for the driver pod on node %s to install driver %s (%s=%s): the reboot would load %s again. "+
		"The driver pod installs it now that the node is drained; if its DriverInstallFailed event names an error, fix the driver image or driver.installCommand and delete the driver pod on node %s",
		n.Name, target, k.InstalledDriver(), installed, installed, n.Name)
}

// cordon takes the node's cordon for a recovery reboot. A node the
// rollout holds is cordoned by the rollout, not by an admin: the recovery
// copies the rollout's record of whether an admin had cordoned it.
func cordon(n *corev1.Node, owners contract.CordonOwners, k contract.Keys) Action {
	a := Action{Kind: Cordon, Reason: contract.ReasonRecovery, AdminCordoned: n.Spec.Unschedulable,
		Why: "recovery reboot: cordon before evicting NPU pods"}
	if owners.Upgrade {
		a.AdminCordoned = n.Annotations[k.UpgradeWasCordoned()] == contract.True
		a.Why += fmt.Sprintf(" (the driver upgrade holds the cordon too, state %s)", n.Labels[k.UpgradeState()])
	}
	return a
}

// uncordon lets go of the recovery's cordon once the recovery is over:
// the node is uncordoned only if no other owner holds it and no admin had
// cordoned it.
func uncordon(owners contract.CordonOwners, k contract.Keys) Action {
	a := Action{Kind: Uncordon, Why: fmt.Sprintf("recovery done and %s=true", k.DriverReady())}
	switch {
	case owners.Upgrade:
		a.KeepCordoned = true
		a.Why += "; the node stays cordoned: the driver upgrade still holds it and uncordons it when done"
	case owners.ByAdmin:
		a.KeepCordoned = true
		a.Why += "; the node stays cordoned: it was cordoned before the recovery"
	}
	return a
}

// settle judges the finished reboots of a node with no reboot pending
// that show by now that they achieved their purpose. An unreadable
// history is left alone here: the next reboot request is refused with the
// error and the fix.
func settle(n *corev1.Node, k contract.Keys) (Action, bool) {
	h, err := budget.Parse(n.Annotations[k.RebootHistory()])
	if err != nil {
		return Action{}, false
	}
	h, settled := judge(h, n, k, false)
	if len(settled) == 0 {
		return Action{}, false
	}
	why := make([]string, len(settled))
	for i, j := range settled {
		why[i] = j.String()
	}
	return Action{Kind: Settle, History: h, Why: "loop guard: " + strings.Join(why, "; ") + "; a reboot that achieved its purpose does not count"}, true
}

// decideIssued continues a reboot whose bookkeeping is recorded.
func decideIssued(f Facts, p Policy, now time.Time, from string, reason contract.RebootReason) Action {
	if from != f.BootID {
		return Action{Kind: Complete, Reason: reason, Why: fmt.Sprintf("boot ID changed from %s to %s: the reboot happened", from, f.BootID)}
	}
	if !f.IssuedAt.IsZero() {
		if deadline := f.IssuedAt.Add(p.IssueTimeout); now.Before(deadline) {
			return Action{Kind: Wait, Cause: CauseGoingDown, Until: deadline, Reason: reason, Why: "reboot command issued; waiting for the machine to go down"}
		}
		return Action{Kind: Fail, Reason: reason, Why: fmt.Sprintf("the reboot command returned at %s but the machine was still up %s later", f.IssuedAt.UTC().Format(time.RFC3339), p.IssueTimeout)}
	}
	if now.Before(f.RetryAt) {
		a := Action{Kind: Wait, Cause: CauseBackoff, Until: f.RetryAt, Reason: reason, Why: "reboot retries after the last failure"}
		if f.SlotHeld {
			return Action{Kind: ReleaseSlot, Cause: CauseBackoff, Reason: reason, Why: "reboot failed; give the slot back during the backoff"}
		}
		return a
	}
	if !f.SlotHeld {
		return Action{Kind: AcquireSlot, Reason: reason, Why: "reboot recorded but not yet carried out; needs a reboot slot"}
	}
	// Recorded and counted before this process started (or before a
	// failure): run the command again, without counting it again.
	return Action{Kind: Reboot, Reason: reason, Why: "reboot recorded; running the reboot command"}
}

func authority(auto bool, reason contract.RebootReason) string {
	switch {
	case !auto:
		return "approve-reboot"
	case reason == contract.ReasonUpgrade:
		return "--auto-upgrade"
	default:
		return "--auto-recover"
	}
}

func reasonText(r contract.RebootReason) string {
	if r == "" {
		return "unspecified"
	}
	return string(r)
}

func approveCommand(node string, k contract.Keys) string {
	return fmt.Sprintf("kubectl annotate node %s %s=true", node, k.ApproveReboot())
}

func resetCommand(node string, k contract.Keys) string {
	return fmt.Sprintf("kubectl annotate node %s %s-", node, k.RebootHistory())
}
