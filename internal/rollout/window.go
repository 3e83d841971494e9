package rollout

// Maintenance windows (Policy.Windows) and the settling delay
// (Policy.Settle). The rollout alone judges the upgrade windows, on its
// own clock: outside them it admits no node (an approved node aside:
// the approval is the operator's decision for that node), and when the
// window that closed last says wait, it holds the upgrade reboots not
// started yet (contract.RebootHold, which the rebooter obeys), so that
// nothing in the cluster compares one machine's clock with another's
// window.

import (
	"fmt"
	"strings"
	"time"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/window"
)

// windowView is the upgrade windows at the moment of one decision. The
// zero value is "no windows": always open, nothing held.
type windowView struct {
	set    bool
	closed bool
	// wait: the window that closed last holds the reboots in flight.
	wait  bool
	state window.State
	now   time.Time
}

func viewWindows(s window.Schedule, now time.Time) windowView {
	st, ok := window.At(s, now)
	if !ok {
		return windowView{}
	}
	return windowView{set: true, closed: !st.Open, wait: s.InFlightNow(now) == window.Wait, state: st, now: now}
}

// holdsReboot is true when n's upgrade reboot, not started yet, must wait
// for the window. A recovery reboot serving the upgrade is the
// rebooter's to judge (recoveryPolicy's windows), and an approval lets
// the node through.
func (w windowView) holdsReboot(n NodeView) bool {
	return w.closed && w.wait && !n.Approved && !recoveryPending(n)
}

// describe is the schedule's state for notes and messages.
func (w windowView) describe() string { return w.state.Describe(w.now) }

// requeue is when the windows change what the rollout may do.
func (w windowView) requeue() time.Duration {
	if !w.set {
		return 0
	}
	return w.state.Next.Sub(w.now)
}

// admissionNote says why a queued node waits for the window.
func (w windowView) admissionNote(b builder, n NodeView) string {
	return fmt.Sprintf("waiting for the maintenance window: %s; to upgrade it now: kubectl annotate node %s %s=true",
		w.describe(), n.Name, b.k.ApproveReboot())
}

// holdNote says why a node's upgrade reboot waits.
func (w windowView) holdNote(b builder, n NodeView, p Policy) string {
	if !p.AutoUpgrade {
		return fmt.Sprintf("waiting for approval: kubectl annotate node %s %s=true (the maintenance window is %s; the approval lets the reboot through it)",
			n.Name, b.k.ApproveReboot(), w.describe())
	}
	return fmt.Sprintf("reboot waits for the maintenance window (inFlight: wait), cordoned and drained: %s; to reboot it now: kubectl annotate node %s %s=true",
		w.describe(), n.Name, b.k.ApproveReboot())
}

// holdEvent is the MaintenanceWindowClosed event of a held reboot.
func (w windowView) holdEvent(b builder, n NodeView) Event {
	return Event{Reason: contract.EventMaintenanceWindowClosed, Message: fmt.Sprintf(
		"node %s: its upgrade reboot waits for the maintenance window (inFlight: wait), the node cordoned and drained: %s; to reboot it now: kubectl annotate node %s %s=true",
		n.Name, w.describe(), n.Name, b.k.ApproveReboot())}
}

// setHold puts the hold on n's reboot request (hold) or lifts it.
func setHold(b builder, n NodeView, hold bool) Action {
	a := Action{Kind: ActTransition, Node: n.Name, ResourceVersion: n.ResourceVersion, From: n.State, To: n.State,
		Change: kube.NodeChange{Labels: map[string]*string{}, Annotations: map[string]*string{b.k.RebootHold(): nil}}}
	switch {
	case hold:
		a.Change.Annotations[b.k.RebootHold()] = kube.Set(contract.HoldMaintenanceWindow)
		a.Message = "maintenance window closed: the reboot is held until it opens"
		a.Events = append(a.Events, b.win.holdEvent(b, n))
	case n.Approved:
		a.Message = "approved: the reboot goes ahead through the closed maintenance window"
	default:
		a.Message = "reboot hold lifted: " + b.win.liftReason()
	}
	return a
}

func (w windowView) liftReason() string {
	if !w.set || !w.closed {
		return "the maintenance window is open"
	}
	return "the window that closed last lets reboots in flight finish (inFlight: finish)"
}

// WindowWait is a MaintenanceWindowClosed event the controller records
// once per node and opening: the nodes the budgets would admit now but
// for the window.
type WindowWait struct {
	Node    string
	Until   time.Time
	Message string
}

func (w windowView) admissionEvent(b builder, n NodeView) WindowWait {
	return WindowWait{Node: n.Name, Until: w.state.Next, Message: fmt.Sprintf(
		"node %s: its driver upgrade (%s → %s) waits for the maintenance window: %s; to upgrade it now: kubectl annotate node %s %s=true",
		n.Name, n.Loaded, n.Desired, w.describe(), n.Name, b.k.ApproveReboot())}
}

// WindowStatus is the upgrade windows in status and the rollout's
// summary.
type WindowStatus struct {
	Open bool `json:"open"`
	// Next is when that changes: the close, or the next opening.
	Next time.Time `json:"next"`
	// Summary says it for humans, on the window's own clock.
	Summary string `json:"summary"`
	// Waiting are the nodes that wait for the window to open: queued,
	// or in flight with their reboot held.
	Waiting []string `json:"waiting,omitempty"`
}

// maxNamedWaiting bounds the nodes a window line names.
const maxNamedWaiting = 10

// Line is the status line of the windows:
// "maintenance window: closed until 2026-05-02T22:00:00+02:00 (in
// 3h5m0s, window sat,sun 22:00-04:00 Europe/Berlin wait); waiting for
// it: npu-0, npu-1".
func (w WindowStatus) Line() string {
	line := "maintenance window: " + w.Summary
	if len(w.Waiting) > 0 {
		names := w.Waiting
		more := ""
		if len(names) > maxNamedWaiting {
			names, more = names[:maxNamedWaiting], fmt.Sprintf(" and %d more", len(w.Waiting)-maxNamedWaiting)
		}
		line += "; waiting for it: " + strings.Join(names, ", ") + more
	}
	return line
}

func (w windowView) status(waiting []string) *WindowStatus {
	if !w.set {
		return nil
	}
	return &WindowStatus{Open: !w.closed, Next: w.state.Next, Summary: w.describe(), Waiting: waiting}
}

// Return is a node coming back from its upgrade, seen by this process.
type Return struct {
	Node string
	// At is when this process saw it, on its own clock.
	At time.Time
}

// settling says why admissions wait after a node's return, and how much
// longer. The return is the one this process saw; a rollout that started
// part-way through (midway: nodes already done and others queued) cannot
// know when the last one came back and counts from its own start
// (s.ObservedSince): it may wait longer than Settle, never shorter.
func settling(s Snapshot, p Policy, now time.Time, midway bool) (string, time.Duration) {
	if p.Settle <= 0 {
		return "", 0
	}
	r := s.Returned
	what := "node " + r.Node + " came back"
	if r.At.IsZero() {
		if s.ObservedSince.IsZero() || !midway {
			return "", 0
		}
		r.At, what = s.ObservedSince, "this rollout run started (it cannot know when the last node came back)"
	}
	left := r.At.Add(p.Settle).Sub(now)
	if left <= 0 {
		return "", 0
	}
	return fmt.Sprintf("settling: the next node starts %s after %s (settleSeconds), %s left", p.Settle, what, window.Round(left)), left
}
