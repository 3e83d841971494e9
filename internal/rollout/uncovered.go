package rollout

import (
	"github.com/openfuyao/npu-stack/internal/contract"
)

// decideNoDriver: no driver DaemonSet is managed (driver.enabled false).
// There is nothing to upgrade to; every node the rollout had taken up is
// given back, and the rollout is finished once none is left.
func decideNoDriver(b builder, s Snapshot) Decision {
	d := Decision{Outcome: Finished, Waiting: map[string]string{}}
	d.Progress.Total = len(s.Nodes)
	for _, n := range s.Nodes {
		if busy, ok := s.Busy[n.Name]; ok {
			d.Waiting[n.Name] = busy
			d.Outcome = Running
			continue
		}
		if abandoned(n) {
			d.Actions = append(d.Actions, abandon(b, n, "no driver DaemonSet is managed (driver.enabled is false)"))
		}
	}
	if len(d.Actions) > 0 {
		d.Outcome = Running
	}
	return d
}

// abandoned: a node the rollout had taken up (queued or in flight) whose
// upgrade has no target any more. A failed node stays for the admin, who
// reads why it failed on it.
func abandoned(n NodeView) bool {
	return n.StateKnown && (n.State == contract.StateUpgradeRequired || n.State.InProgress())
}

// abandon ends the upgrade of a node no driver profile covers any more
// (its profile removed, or the driver disabled): without a target version
// there is nothing to reboot for. The upgrade's reboot request is
// withdrawn unless the rebooter already started it (then it completes, and
// the rebooter clears it after the boot); the node is uncordoned if the
// rollout cordoned it; the state label and bookkeeping go.
func abandon(b builder, n NodeView, why string) Action {
	msg := "upgrade abandoned, node given back without a reboot: " + why
	a := b.transition(n, contract.StateDone, msg)
	if n.RebootRequired && n.RebootReason == string(contract.ReasonUpgrade) {
		if rebootStarted(n) && !rebooted(n) {
			a.Message = "upgrade abandoned, node given back (its reboot had already started): " + why
		} else {
			a.Change.Labels[b.k.RebootRequired()] = nil
			a.Change.Annotations[b.k.RebootReason()] = nil
		}
	}
	// The rollout cordoned the node when it left cordon-required; its
	// cordon goes as at the end of any upgrade (a recovery may keep it).
	if n.State.InProgress() && n.State != contract.StateCordonRequired {
		giveBack(b, n, &a)
	}
	a.Events = append(a.Events, Event{Reason: contract.EventUpgradeAbandoned, Warning: true, Message: a.Message})
	dropApproval(b, n, &a)
	return a
}
