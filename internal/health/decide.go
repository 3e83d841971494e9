package health

import (
	"fmt"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// NodeView is what the watch reads from its Node.
type NodeView struct {
	Name           string
	RebootRequired bool
	RebootReason   string
	// DriverReady is the driver-ready label value, "" when absent.
	DriverReady string
	// RebootInFlight: the rebooter has recorded a reboot of this node
	// (reboot-from-boot-id set), which the loop guard judges by itself.
	RebootInFlight bool
}

// RecoveryRequested is a pending reboot that a wedge asked for.
func (v NodeView) RecoveryRequested() bool {
	return v.RebootRequired && v.RebootReason == string(contract.ReasonRecovery)
}

// OtherRebootRequested is a pending reboot for another reason (an upgrade),
// which the watch must never alter; it resets the chips all the same.
func (v NodeView) OtherRebootRequested() bool {
	return v.RebootRequired && v.RebootReason != string(contract.ReasonRecovery)
}

// Observation is everything one decision looks at.
type Observation struct {
	Probe Result
	// Marker is whether the driver-ready marker exists.
	Marker bool
	// WedgeRecorded is whether this boot's wedge record exists: the watch
	// removed the marker and owes its restoration.
	WedgeRecorded bool
	Node          NodeView
}

// Policy is the configured tolerance.
type Policy struct {
	// FailureThreshold consecutive failed probes make a wedge.
	FailureThreshold int
	// RecoveryThreshold consecutive passing probes undo a wedge (withdraw
	// its recovery request): a chip that flaps, failing and passing by
	// turns, stays wedged instead of being given back after every pass.
	RecoveryThreshold int
}

// State is what the watch remembers between probes. It is deliberately
// only counters and the last problem reported: everything that must
// survive a restart is on the Node or in the marker directory.
type State struct {
	Failures int
	// Passes counts the consecutive passing probes while wedged.
	Passes int
	// Problem is the host problem last reported (its What), so that one
	// that persists is reported once, not at every probe.
	Problem string
}

// Event is an Event to emit on the Node.
type Event struct {
	Reason  contract.EventReason
	Warning bool
	Message string
}

// Actions are the changes one decision asks for. The watcher records a
// wedge and removes the marker before any API call (node-local safety
// first: a node cut off from the API server must not keep offering wedged
// chips), then applies the Node patch, restores the marker before clearing
// the record, and emits the Events, so a crash or a failed API call at any
// point leaves a state from which the next decision converges.
type Actions struct {
	// DriverReady, if set, is the new driver-ready label value.
	DriverReady *bool
	// RequestRecovery sets reboot-required=true and reason recovery;
	// WithdrawRecovery removes both.
	RequestRecovery, WithdrawRecovery bool
	RemoveMarker, RestoreMarker       bool
	RecordWedge, ClearWedge           bool
	// CountWedge, with WithdrawRecovery, records the withdrawn wedge in
	// the loop guard's history in the same patch: a wedge that ends
	// without a reboot still counts, so a flapping node is stopped.
	CountWedge bool
	Events     []Event
}

// Empty reports whether nothing needs doing.
func (a Actions) Empty() bool {
	return a.DriverReady == nil && !a.RequestRecovery && !a.WithdrawRecovery && !a.RemoveMarker &&
		!a.RestoreMarker && !a.RecordWedge && !a.ClearWedge && !a.CountWedge && len(a.Events) == 0
}

// Decide turns one probe into actions. The node counts as wedged when this
// boot has a wedge record or the Node carries a recovery reboot request, so
// a restarted watch resumes from what it finds instead of assuming health.
//
//   - Probe passes RecoveryThreshold times in a row: a wedge is a false
//     positive (or healed) and is undone:
//     the recovery request withdrawn, the marker restored if the watch took
//     it, driver-ready back to whether a marker exists.
//   - Probe fails while wedged: stay wedged (and finish what a crash left
//     half done); if no reboot is pending any more, ask for one again
//     after the threshold.
//   - Probe fails with no marker and no wedge: the driver is not up yet
//     (fresh boot, install running); nothing to judge.
//   - Probe fails with a marker: count; at the threshold, wedge: take the
//     marker away, driver-ready=false and ask for a recovery reboot unless
//     another reboot is already pending.
//   - npu-smi could not run at all (a host problem): not counted, nothing
//     wedged, undone or asked for; driver-ready=false and an
//     NPUHostProblem event (decideProblem).
func Decide(p Policy, st State, obs Observation) (State, Actions) {
	var a Actions
	setReady := func(v bool) {
		want := contract.False
		if v {
			want = contract.True
		}
		if obs.Node.DriverReady != want {
			a.DriverReady = &v
		}
	}
	recovery := obs.Node.RecoveryRequested()
	wedged := obs.WedgeRecorded || recovery

	if obs.Probe.Problem != nil {
		setReady(false)
		return decideProblem(st, obs, a)
	}
	st.Problem = ""
	if obs.Probe.OK {
		st.Failures = 0
		if !wedged {
			st.Passes = 0
			setReady(obs.Marker)
			return st, a
		}
		// A wedge is undone only after RecoveryThreshold passes in a
		// row: one good probe of a flapping chip proves nothing, and
		// undoing the wedge would give the node back, only to cordon and
		// evict it again at the next failures.
		st.Passes++
		if st.Passes < p.RecoveryThreshold {
			return st, a
		}
		st.Passes = 0
		a.WithdrawRecovery = recovery
		// Only a wedge of this boot that ends without a reboot counts: a
		// request left from an earlier boot was answered by that reboot,
		// and a reboot the rebooter recorded is judged by the loop guard.
		a.CountWedge = recovery && obs.WedgeRecorded && !obs.Node.RebootInFlight
		ready := obs.Marker
		if obs.WedgeRecorded {
			a.ClearWedge = true
			a.RestoreMarker = !obs.Marker
			ready = true
		}
		setReady(ready)
		msg := fmt.Sprintf("chips healthy again (%d consecutive passing probes)", max(p.RecoveryThreshold, 1))
		if recovery {
			msg += "; reboot request with reason=recovery withdrawn"
		}
		if a.CountWedge {
			msg += "; the wedge counts towards the loop guard (rebooter.rebootBudget) as one that ended without a reboot"
		}
		if a.RestoreMarker {
			msg += "; driver-ready marker restored"
		}
		a.Events = append(a.Events, Event{Reason: contract.EventChipRecovered, Message: msg})
		return st, a
	}

	st.Passes = 0
	if wedged {
		st.Failures = min(st.Failures+1, p.FailureThreshold)
		// Record the wedge only when taking a marker away: a missing
		// marker with no record was never written this boot (the driver
		// entry is still at work) and is not the watch's to restore.
		a.RemoveMarker = obs.Marker
		a.RecordWedge = obs.Marker && !obs.WedgeRecorded
		setReady(false)
		if recovery || obs.Node.OtherRebootRequested() || st.Failures < p.FailureThreshold {
			return st, a
		}
		// Wedged this boot, yet nothing asks for a reboot any more: the
		// rebooter cleared a request from the previous boot after this
		// boot's wedge was recorded (a sticky fault), an upgrade reboot
		// was withdrawn, or an admin removed the label. Left alone the
		// node would stay wedged and cordoned for good; ask again, and
		// let the rebooter's loop guard decide whether it may.
		a.RequestRecovery = true
		cause := fmt.Sprintf("chips still failing (%d consecutive probes, last: %s) and no reboot is pending", st.Failures, obs.Probe.Reason)
		a.Events = append(a.Events,
			Event{Reason: contract.EventChipWedged, Warning: true, Message: fmt.Sprintf("%s; driver-ready=false, reboot requested again with reason=%s", cause, contract.ReasonRecovery)},
			Event{Reason: contract.EventRebootRequired, Warning: true, Message: fmt.Sprintf("reason=%s: %s", contract.ReasonRecovery, cause)},
		)
		return st, a
	}
	if !obs.Marker {
		st.Failures = 0
		setReady(false)
		return st, a
	}
	st.Failures++
	if st.Failures < p.FailureThreshold {
		return st, a
	}
	a.RemoveMarker, a.RecordWedge = true, true
	setReady(false)
	cause := fmt.Sprintf("%d consecutive failed chip probes, last: %s", st.Failures, obs.Probe.Reason)
	if obs.Node.OtherRebootRequested() {
		a.Events = append(a.Events, Event{Reason: contract.EventChipWedged, Warning: true, Message: fmt.Sprintf(
			"%s; driver-ready=false, marker removed; a reboot with reason=%s is already pending and will reset the chips, so no recovery reboot is requested", cause, obs.Node.RebootReason)})
		return st, a
	}
	a.RequestRecovery = true
	a.Events = append(a.Events,
		Event{Reason: contract.EventChipWedged, Warning: true, Message: fmt.Sprintf("%s; driver-ready=false, marker removed, reboot requested with reason=%s", cause, contract.ReasonRecovery)},
		Event{Reason: contract.EventRebootRequired, Warning: true, Message: fmt.Sprintf("reason=%s: %s", contract.ReasonRecovery, cause)},
	)
	return st, a
}
