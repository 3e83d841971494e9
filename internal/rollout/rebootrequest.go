package rollout

import (
	"fmt"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// The rollout asks for one reboot per upgrade of a node and never for a
// second one: the boot it asked to leave (driver-upgrade.boot-id) is
// compared with the kubelet's boot ID and with the rebooter's records of
// the reboots it started and completed, whichever arrives first.

// enterReboot asks for the reboot that loads the desired driver. A
// recovery reboot already requested does that too (the entry gate loads
// the desired version on every fresh boot): the rollout keeps it, reason
// recovery and all, so that recoveryPolicy, not the upgrade's
// autoUpgrade, decides whether it needs an approval.
func enterReboot(b builder, n NodeView) Action {
	a := b.transition(n, contract.StateRebootRequired, "reboot requested to load driver "+n.Desired)
	a.Change.Annotations[b.k.UpgradeBootID()] = kube.Set(n.BootID)
	// The driver pod installs, and the rebooter waits for, this version.
	a.Change.Annotations[b.k.UpgradeTarget()] = kube.Set(n.Desired)
	if recoveryPending(n) {
		a.Message = "a recovery reboot is already requested (reason=recovery); it loads driver " + n.Desired + " too, so no upgrade reboot is asked for"
		return a
	}
	a.Change.Labels[b.k.RebootRequired()] = kube.Set(contract.True)
	a.Change.Annotations[b.k.RebootReason()] = kube.Set(string(contract.ReasonUpgrade))
	a.Events = append(a.Events, Event{Reason: contract.EventRebootRequired,
		Message: fmt.Sprintf("reason=%s: driver %s loaded, %s desired; a reboot loads it", contract.ReasonUpgrade, n.Loaded, n.Desired)})
	// Asked for all the same, so the driver pod installs the new version
	// meanwhile; the hold keeps the rebooter from starting it.
	if b.win.holdsReboot(n) {
		a.Change.Annotations[b.k.RebootHold()] = kube.Set(contract.HoldMaintenanceWindow)
		a.Message += "; held for the maintenance window"
		a.Events = append(a.Events, b.win.holdEvent(b, n))
	}
	return a
}

// retarget follows a desired version that changed while the node waits
// for its reboot: the rebooter waits for the driver pod to install the
// target, and the new driver pod installs the new desired version.
func retarget(b builder, n NodeView) Action {
	return Action{Kind: ActTransition, Node: n.Name, ResourceVersion: n.ResourceVersion, From: n.State, To: n.State,
		Message: fmt.Sprintf("desired driver is now %s (was %s); the reboot waits for its install", n.Desired, orNone(n.Target)),
		Change:  kube.NodeChange{Labels: map[string]*string{}, Annotations: map[string]*string{b.k.UpgradeTarget(): kube.Set(n.Desired)}}}
}

// rebootDone is true when the rebooter completed a reboot that left the
// boot the rollout asked to reboot: it happened, even if the kubelet has
// not reported the new boot ID yet.
func rebootDone(n NodeView) bool {
	return n.UpgradeBootID != "" && n.RebootedFrom == n.UpgradeBootID
}

// requestGone decides for a node in reboot-required whose reboot request
// is gone: the rebooter cleared it after the reboot (wait for the kubelet
// to report the new boot), or someone removed it before (ask again).
func requestGone(b builder, n NodeView) ([]Action, string) {
	if rebootDone(n) {
		return nil, fmt.Sprintf("rebooted (the rebooter completed the reboot of boot %s); waiting for the kubelet to report the new boot ID (status.nodeInfo.bootID)", n.UpgradeBootID)
	}
	a := Action{Kind: ActTransition, Node: n.Name, ResourceVersion: n.ResourceVersion, From: n.State, To: n.State,
		Message: "reboot request was removed before the reboot; asking again",
		Change: kube.NodeChange{Labels: map[string]*string{b.k.RebootRequired(): kube.Set(contract.True)},
			Annotations: map[string]*string{b.k.RebootReason(): kube.Set(string(contract.ReasonUpgrade))}}}
	if hold := b.win.holdsReboot(n); hold != (n.RebootHold != "") {
		a.Change.Annotations[b.k.RebootHold()] = nil
		if hold {
			a.Change.Annotations[b.k.RebootHold()] = kube.Set(contract.HoldMaintenanceWindow)
		}
	}
	return []Action{a}, ""
}

// recoveryServesNote says why a node whose upgrade reboot is a pending
// recovery reboot waits.
func recoveryServesNote(b builder, n NodeView) string {
	return fmt.Sprintf("a recovery reboot (reason=recovery) is pending and loads driver %s too; recoveryPolicy decides when it may happen "+
		"(with autoRecover=false it waits for approval: kubectl annotate node %s %s=true)", n.Desired, n.Name, b.k.ApproveReboot())
}

// viewOwnership reads the rebooter's record and the cordon's owners.
func viewOwnership(n *NodeView, labels, annotations map[string]string, k contract.Keys) {
	n.RebootedFrom = annotations[k.RebootedFromBootID()]
	n.Cordon = k.Cordon(labels, annotations)
}
