package rollout

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// blockerReasons are the events in which the other actors say why a node
// waits on them: the rebooter holding a reboot (approval, slot, uptime
// guard, loop guard, storm protection) and refused evictions.
var blockerReasons = map[contract.EventReason]bool{
	contract.EventRebootPending:   true,
	contract.EventRebootRefused:   true,
	contract.EventRecoveryPaused:  true,
	contract.EventEvictionBlocked: true,
	contract.EventApprovalInvalid: true,
	// The rebooter keeping an automatic recovery for its window.
	contract.EventMaintenanceWindowClosed: true,
	// The driver pod: an install over the loaded driver that waits for a
	// holder of the chips, or failed and waits for its retry.
	contract.EventDriverInstallBlocked: true,
	contract.EventDriverInstallFailed:  true,
}

// EventSource is the component the rollout's events are recorded as.
const EventSource = "npu-hooks-rollout"

// Blocker is "<reason>: <message>" of the newest event among events that
// explains a wait and is not older than since; "" when none does.
func Blocker(events []corev1.Event, since time.Time) string {
	var best *corev1.Event
	var bestAt time.Time
	for i := range events {
		e := &events[i]
		if !blockerReasons[contract.EventReason(e.Reason)] {
			continue
		}
		if e.Reason == string(contract.EventMaintenanceWindowClosed) && e.Source.Component == EventSource {
			continue // the rollout's own: its note says the same
		}
		at := eventTime(e)
		if at.Before(since.Truncate(time.Second)) {
			continue
		}
		if best == nil || at.After(bestAt) {
			best, bestAt = e, at
		}
	}
	if best == nil {
		return ""
	}
	return best.Reason + ": " + best.Message
}

// eventTime is when an event was last seen, whichever API wrote it.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// WithBlockers completes the notes of st's waiting nodes with what their
// blockers say (blockers: node → Blocker), so status names the actual
// cause and its fix instead of the rollout's guess.
func WithBlockers(st Status, blockers map[string]string) Status {
	for i, r := range st.Nodes {
		b := blockers[r.Node]
		if b == "" {
			continue
		}
		st.Nodes[i].Blocker = b
		if r.Note == "" {
			st.Nodes[i].Note = b
		} else {
			st.Nodes[i].Note = r.Note + "; " + b
		}
	}
	return st
}
