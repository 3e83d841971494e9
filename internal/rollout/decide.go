package rollout

import (
	"fmt"
	"strings"
	"time"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// Outcome says whether the rollout is over.
type Outcome string

const (
	// Running: nodes are in flight or waiting for the cluster.
	Running Outcome = "running"
	// Finished: every node runs its desired driver (skipped nodes aside).
	Finished Outcome = "finished"
	// Paused: nothing in flight and the policy forbids starting more.
	Paused Outcome = "paused"
	// Stuck: nothing in flight and nothing more can start (failure budget
	// spent, failed canary, failed nodes left): an admin must act.
	Stuck Outcome = "stuck"
	// WaitingForWindow: the maintenance window is closed and everything
	// left waits for it to open (queued nodes, reboots held); not a
	// failure. The rollout waits if it opens before the run's deadline,
	// else ends and the resume CronJob carries on.
	WaitingForWindow Outcome = "waiting-for-window"
)

// Decision is what Decide returns.
type Decision struct {
	Actions []Action
	// Requeue asks for another decision after this long even if nothing
	// changes in the cluster (a timeout may expire); 0 = not needed.
	Requeue time.Duration
	Outcome Outcome
	// Waiting says, per node, why it is not moving (for status, plan and
	// the final summary).
	Waiting  map[string]string
	Progress Progress
	// LeftBehind are the nodes the rollout cannot move for reasons of
	// their own (see LeftBehind), sorted by name; Finished means every
	// other node is done.
	LeftBehind []LeftBehind
	// Window is the upgrade windows and who waits for them; nil without
	// windows.
	Window *WindowStatus
	// Announce are the MaintenanceWindowClosed events of nodes the
	// budgets would admit now but for the window.
	Announce []WindowWait
}

// Progress counts nodes for the progress line.
type Progress struct {
	Total, Done, InFlight, Queued, Failed, Skipped, Unavailable, Budget int
	LeftBehind                                                          int
}

func (p Progress) String() string {
	s := fmt.Sprintf("%d/%d nodes up to date, %d in flight, %d queued, %d failed, %d skipped; unavailable %d/%d",
		p.Done, p.Total, p.InFlight, p.Queued, p.Failed, p.Skipped, p.Unavailable, p.Budget)
	if p.LeftBehind > 0 {
		s += fmt.Sprintf("; %d left behind", p.LeftBehind)
	}
	return s
}

// Decide computes the next actions for the cluster in s under p at now.
// It is pure: the same snapshot gives the same decision, so a restarted
// rollout continues exactly where the node labels say it was.
func Decide(s Snapshot, p Policy, keys contract.Keys, now time.Time) Decision {
	b := builder{k: keys, now: now, win: viewWindows(p.Windows, now)}
	d := Decision{Outcome: Running, Waiting: map[string]string{}}
	if s.NoDriver {
		return decideNoDriver(b, s)
	}
	budget, err := ResolveMaxUnavailable(p.MaxUnavailable, len(s.Nodes))
	if err != nil {
		budget = 0
		d.Waiting["*"] = err.Error()
	}
	d.Progress.Total, d.Progress.Budget = len(s.Nodes), budget

	var candidates []*NodeView
	var windowWaiting []string
	failed, inFlight, unavailable, held := 0, 0, 0, 0
	gate, left := gateCanaries(s.Nodes, keys), leftSet{}
	for _, n := range s.Nodes {
		if n.Unavailable() {
			unavailable++
		}
		if n.State.InProgress() {
			inFlight++
		}
		if n.State == contract.StateFailed {
			failed++
		}
	}
	d.Progress.InFlight, d.Progress.Failed, d.Progress.Unavailable = inFlight, failed, unavailable

	for i, n := range s.Nodes {
		if busy, ok := s.Busy[n.Name]; ok {
			d.Waiting[n.Name] = busy
			continue
		}
		var acts []Action
		var wait string
		var requeue time.Duration
		switch {
		case !n.StateKnown:
			acts = append(acts, b.fail(n, StepState, fmt.Sprintf("unknown state %q", n.RawState)))
		case n.ProfileError != "" && abandoned(n):
			acts = append(acts, abandon(b, n, n.ProfileError))
		case n.State == contract.StateDone:
			wait = decideIdle(b, n, &acts, &d.Progress)
		case n.State == contract.StateUpgradeRequired:
			if !n.OutOfDate() {
				acts = append(acts, b.transition(n, contract.StateDone, "driver "+n.Loaded+" is already the desired version"))
			} else if n.Skip {
				wait = "skip label set"
				d.Progress.Skipped++
				acts = append(acts, staleApproval(b, n)...)
			} else {
				candidates = append(candidates, &s.Nodes[i])
			}
		case n.State == contract.StateFailed:
			wait = "failed at " + n.FailureStep + ": " + n.FailureReason + "; after fixing it, retry with: kubectl label node " +
				n.Name + " " + keys.UpgradeState() + "=" + string(contract.StateUpgradeRequired) + " --overwrite"
		default:
			acts, wait, requeue = decideInFlight(b, n, p, s, now)
			if len(acts) == 0 && heldForWindow(b, n) {
				held++
				windowWaiting = append(windowWaiting, n.Name)
			}
		}
		d.Actions = append(d.Actions, acts...)
		if wait != "" {
			d.Waiting[n.Name] = wait
		}
		d.Requeue = minPositive(d.Requeue, requeue)
	}

	settle, settleLeft := settling(s, p, now, d.Progress.Done > 0 && len(candidates) > 0)
	adm := admit(b, candidates, p, &d, admitBudget{inFlight, unavailable, budget, failed}, gate, left, settle)
	d.Progress.InFlight += adm.admitted
	d.Progress.Queued = len(candidates) - adm.admitted
	windowWaiting = append(windowWaiting, adm.windowWaiting...)
	if settle != "" && adm.settling {
		d.Requeue = minPositive(d.Requeue, settleLeft)
	}
	d.Requeue = minPositive(d.Requeue, b.win.requeue())

	// Nodes whose reboot waits for the window count as in flight, but
	// nothing moves them before it opens.
	if len(d.Actions) == 0 && inFlight == held && len(s.Busy) == 0 {
		d.Outcome = outcome(s, p, keys, candidates, failed, gate, left)
		if held > 0 || d.Outcome == Running && len(adm.windowWaiting) > 0 {
			d.Outcome = WaitingForWindow
		}
	}
	d.Window = b.win.status(windowWaiting)
	if d.Outcome == Finished {
		// Fleet-wide check: every re-roll target pod must have started
		// after its node's driver became ready.
		d.Actions = append(d.Actions, stragglers(s, keys, &d, left)...)
		if len(d.Actions) > 0 || d.Waiting["*reroll"] != "" {
			d.Outcome = Running
		}
	}
	d.LeftBehind = listLeftBehind(s, left, keys)
	d.Progress.LeftBehind = len(d.LeftBehind)
	return d
}

// decideIdle handles a node without a state label.
func decideIdle(b builder, n NodeView, acts *[]Action, pr *Progress) string {
	switch {
	case n.ProfileError != "":
		return n.ProfileError
	case n.Loaded == "":
		return "driver version not reported yet (driver pod not running?)"
	case n.UpToDate():
		pr.Done++
		*acts = append(*acts, staleApproval(b, n)...)
		return ""
	case n.Skip:
		pr.Skipped++
		*acts = append(*acts, staleApproval(b, n)...)
		return "skip label set"
	}
	why := fmt.Sprintf("driver %s loaded, %s desired", n.Loaded, n.Desired)
	if n.Loaded == n.Desired {
		why = fmt.Sprintf("driver %s loaded and desired, but %s installed on disk (the next boot would load it)", n.Loaded, n.Installed)
	}
	*acts = append(*acts, b.transition(n, contract.StateUpgradeRequired, why))
	return ""
}

// decideInFlight advances a node between cordon and uncordon.
func decideInFlight(b builder, n NodeView, p Policy, s Snapshot, now time.Time) ([]Action, string, time.Duration) {
	// Measured on this process's clock from when it first saw the node in
	// this state: since may have been written on another machine.
	elapsed := now.Sub(stateSeen(n, now))
	// The desired version went back to the loaded one (a rollback before
	// this node rebooted): nothing to reboot for, give the node back. A
	// node that booted since its reboot was asked for did reboot, even if
	// the rebooter already cleared the start time (a fast reboot, or a
	// rollout restarted meanwhile): that boot is validated like any other.
	if !n.OutOfDate() && n.UpToDate() && n.State != contract.StateValidationRequired && n.State != contract.StateUncordonRequired && !rebootStarted(n) && !rebooted(n) && !rebootDone(n) {
		a := b.transition(n, contract.StateUncordonRequired, "driver "+n.Loaded+" is the desired version again; no reboot needed")
		if n.RebootRequired && n.RebootReason == string(contract.ReasonUpgrade) {
			a.Change.Labels[b.k.RebootRequired()] = nil
			a.Change.Annotations[b.k.RebootReason()] = nil
		}
		return []Action{a}, "", 0
	}
	switch n.State {
	case contract.StateCordonRequired:
		return []Action{takeCordon(b, n)}, "", 0

	case contract.StateWaitForJobsRequired:
		if p.WaitForCompletion.Selector == nil || n.WaitPods == 0 {
			return []Action{b.transition(n, contract.StatePodDeletionRequired, "no workloads to wait for")}, "", 0
		}
		if t := p.WaitForCompletion.Timeout; t > 0 {
			if elapsed >= t {
				return []Action{b.transition(n, contract.StatePodDeletionRequired,
					fmt.Sprintf("waited %s for %d pods to complete; proceeding", t, n.WaitPods))}, "", 0
			}
			return nil, waitPodsNote(n) + fmt.Sprintf(", at most %s more", (t-elapsed).Round(time.Second)), t - elapsed
		}
		return nil, waitPodsNote(n) + " (no timeout)", 0

	case contract.StatePodDeletionRequired:
		next := b.transition(n, contract.StateDrainRequired, "NPU pods removed")
		if n.NPUPods == 0 {
			return []Action{next}, "", 0
		}
		return []Action{{Kind: ActEvict, Node: n.Name, Evict: EvictNPUPods, Step: StepPodDeletion, Then: &next,
			Message: fmt.Sprintf("evicting %d NPU pods", n.NPUPods)}}, "", 0

	case contract.StateDrainRequired:
		next := enterReboot(b, n)
		if !p.Drain.Enable {
			return []Action{next}, "", 0
		}
		return []Action{{Kind: ActEvict, Node: n.Name, Evict: EvictDrain, Step: StepDrain, Then: &next, Message: "draining"}}, "", 0

	case contract.StateRebootRequired:
		return decideReboot(b, n, p, now)

	case contract.StateValidationRequired:
		return decideValidation(b, n, p, s, now)

	case contract.StateUncordonRequired:
		a := b.transition(n, contract.StateDone, "driver "+n.Loaded+" validated; upgrade done")
		giveBack(b, n, &a)
		dropApproval(b, n, &a)
		return []Action{a}, "", 0
	}
	return nil, "", 0
}

// waitPodsNote names the waitForCompletion pods a node waits for.
func waitPodsNote(n NodeView) string {
	names := strings.Join(n.WaitPodNames, ", ")
	if more := n.WaitPods - len(n.WaitPodNames); more > 0 {
		names += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("waiting for %d pods to complete (waitForCompletion): %s", n.WaitPods, names)
}

// rebootStarted is true when the rebooter issued the reboot for this
// upgrade: it is rebooting the boot the rollout asked to reboot. Boot IDs,
// not times: the rebooter's start time is by the NPU node's clock, which
// need not agree with the rollout's (a reboot started before the request
// recorded another boot ID, or was completed and cleared).
func rebootStarted(n NodeView) bool {
	return n.RebootFrom != "" && n.RebootFrom == n.UpgradeBootID
}

// rebooted is true when the node's boot ID changed since the rollout
// recorded it at reboot-required.
func rebooted(n NodeView) bool {
	return n.UpgradeBootID != "" && n.BootID != "" && n.BootID != n.UpgradeBootID
}

func decideReboot(b builder, n NodeView, p Policy, now time.Time) ([]Action, string, time.Duration) {
	if rebooted(n) {
		a := b.transition(n, contract.StateValidationRequired, "node rebooted")
		if n.RebootHold != "" {
			a.Change.Annotations[b.k.RebootHold()] = nil
		}
		// The rebooter clears these after boot; clearing them here too
		// keeps an unplanned reboot from being followed by a second one.
		if n.RebootRequired && n.RebootReason != string(contract.ReasonRecovery) {
			a.Change.Labels[b.k.RebootRequired()] = nil
			a.Change.Annotations[b.k.RebootReason()] = nil
		}
		return []Action{a}, "", 0
	}
	if n.UpgradeBootID == "" {
		// Crashed between the state change and recording: record now.
		a := enterReboot(b, n)
		a.Message = "re-recording the reboot request"
		return []Action{a}, "", 0
	}
	if !n.RebootRequired {
		acts, wait := requestGone(b, n)
		return acts, wait, 0
	}
	if !rebootStarted(n) && n.Target != "" && n.Target != n.Desired {
		return []Action{retarget(b, n)}, "", 0
	}
	if !rebootStarted(n) {
		if recoveryPending(n) {
			return nil, recoveryServesNote(b, n), 0
		}
		if hold := b.win.holdsReboot(n); hold != (n.RebootHold != "") {
			return []Action{setHold(b, n, hold)}, "", 0
		}
		if n.RebootHold != "" {
			return nil, b.win.holdNote(b, n, p), 0
		}
		if !p.AutoUpgrade && !n.Approved {
			if n.ApprovalValue != "" {
				return nil, fmt.Sprintf("%s=%q is not an approval (only \"true\" is): kubectl annotate node %s %s=true --overwrite",
					b.k.ApproveReboot(), n.ApprovalValue, n.Name, b.k.ApproveReboot()), 0
			}
			return nil, "waiting for approval: kubectl annotate node " + n.Name + " " + b.k.ApproveReboot() + "=true", 0
		}
		return nil, "waiting for the rebooter (its RebootPending and RebootRefused events on the node say why)", 0
	}
	// Counted from when this process first saw the reboot started, on its
	// own clock: reboot-started-at is the NPU node's clock, shown only.
	seen := rebootSeen(n, now)
	left := p.RebootTimeout - now.Sub(seen)
	if p.RebootTimeout > 0 && left <= 0 {
		return []Action{b.fail(n, StepReboot, fmt.Sprintf("node did not come back within %s of its reboot (seen started at %s; the node's clock says %s)",
			p.RebootTimeout, seen.UTC().Format(time.RFC3339), orNone(formatTime(n.RebootStarted))))}, "", 0
	}
	return nil, "rebooting", left
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	case b < a:
		return b
	}
	return a
}

// heldForWindow is true for a node in flight whose only wait is its
// upgrade reboot held for the maintenance window.
func heldForWindow(b builder, n NodeView) bool {
	return n.State == contract.StateRebootRequired && n.RebootHold != "" && b.win.holdsReboot(n) &&
		!rebootStarted(n) && !rebooted(n) && !rebootDone(n)
}
