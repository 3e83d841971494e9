package rollout

import (
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// An approval (approve-reboot=true) authorises one reboot request: the
// one pending when the rebooter uses it, which consumes it in the patch
// that records the reboot. One given for an upgrade that ends without
// using it (the node needed no reboot, was rolled back before it, or is
// up to date or skipped while the bulk approval of the fleet hit it) is
// removed by the rollout, the owner of that moment: left on the node it
// would authorise the node's next reboot request whatever its reason, a
// recovery reboot too under recoveryPolicy.autoRecover=false. An
// approval on a node with a reboot request pending is that request's and
// is left to the rebooter.

// dropApproval removes a left-over approval in a, the action that ends
// n's upgrade, unless a reboot request stays pending after a.
func dropApproval(b builder, n NodeView, a *Action) {
	pending := n.RebootRequired
	if v, ok := a.Change.Labels[b.k.RebootRequired()]; ok && v == nil {
		pending = false // a withdraws the request
	}
	if n.ApprovalValue == "" || pending {
		return
	}
	a.Change.Annotations[b.k.ApproveReboot()] = nil
	a.Events = append(a.Events, approvalRemoved(b, n, "its upgrade ended without using it"))
}

// staleApproval removes the approval of a node that is not in an upgrade
// and has no reboot request pending: nothing this rollout does reboots
// it, so the approval is not for it.
func staleApproval(b builder, n NodeView) []Action {
	if n.ApprovalValue == "" || n.RebootRequired {
		return nil
	}
	why := "the node needs no reboot for this driver version"
	if n.Skip && n.OutOfDate() {
		why = "the node is skipped (" + b.k.UpgradeSkip() + "=true) and gets no upgrade reboot"
	}
	return []Action{{Kind: ActTransition, Node: n.Name, ResourceVersion: n.ResourceVersion, From: n.State, To: n.State,
		Message: "approval removed: " + why,
		Change:  kube.NodeChange{Annotations: map[string]*string{b.k.ApproveReboot(): nil}},
		Events:  []Event{approvalRemoved(b, n, why)}}}
}

func approvalRemoved(b builder, n NodeView, why string) Event {
	return Event{Reason: contract.EventApprovalRemoved,
		Message: "removed " + b.k.ApproveReboot() + "=" + n.ApprovalValue + ": " + why + "; an approval authorises only the reboot request pending when it is used, " +
			"so it cannot authorise a later reboot of another reason (a recovery). Approve again when the node waits for a reboot: kubectl annotate node " +
			n.Name + " " + b.k.ApproveReboot() + "=true"}
}
