package rollout

import (
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// The cordon of a node may be held by the rollout and by a recovery
// reboot at once (contract.CordonOwners): the rollout takes it at
// cordon-required and lets go when the node is done (or given back after
// a failure before the reboot); a recovery takes it when its reboot is
// authorised and lets go when the chips are healthy again. Whoever lets
// go last uncordons, unless an admin had cordoned the node before.

// recoveryPending: the health-watch asked for a recovery reboot.
func recoveryPending(n NodeView) bool {
	return n.RebootRequired && n.RebootReason == string(contract.ReasonRecovery)
}

// cordonedByAdmin is whether n, as it is now, is cordoned by an admin: a
// cordon a recovery holds is an admin's only if the recovery's record
// says so.
func cordonedByAdmin(n NodeView) bool {
	if n.Cordon.Recovery {
		return n.Unschedulable && n.Cordon.ByAdmin
	}
	return n.Unschedulable
}

// takeCordon cordons n at cordon-required. A node a recovery holds is
// cordoned by the recovery, not by an admin: the rollout's record of
// "cordoned before" is then the recovery's.
func takeCordon(b builder, n NodeView) Action {
	a := b.transition(n, contract.StateWaitForJobsRequired, "cordoned")
	a.Change.Unschedulable = ptrBool(true)
	if n.Cordon.Recovery {
		a.Change.Annotations[b.k.UpgradeWasCordoned()] = kube.Set(boolString(n.Cordon.ByAdmin))
		a.Message = "cordoned (a recovery reboot holds the cordon too)"
	}
	return a
}

// giveBack lets go of the rollout's cordon in a, the action that ends n's
// upgrade or gives n back after an early failure. A recovery that holds
// the cordon, or is pending without having taken it yet, keeps the node
// cordoned: the rollout hands the cordon over (recovery-cordoned, with
// the record of whether an admin had cordoned it) and the rebooter
// uncordons when the recovery is over.
func giveBack(b builder, n NodeView, a *Action) {
	// The rollout's own record; with a recovery holding too, both records
	// must say an admin had cordoned it (contract.CordonOwners).
	admin := n.WasCordoned != nil && *n.WasCordoned && (!n.Cordon.Recovery || n.Cordon.ByAdmin)
	switch {
	case n.Cordon.Recovery:
		a.Change.Annotations[b.k.RecoveryWasCordoned()] = setIf(admin)
		a.Message += "; stays cordoned: a recovery reboot holds the node and uncordons it when the chips are healthy again"
	case recoveryPending(n) && n.Unschedulable:
		a.Change.Annotations[b.k.RecoveryCordoned()] = kube.Set(contract.True)
		a.Change.Annotations[b.k.RecoveryWasCordoned()] = setIf(admin)
		a.Message += "; stays cordoned: a recovery reboot is pending (reason=recovery), the cordon is handed over to it and the rebooter uncordons when the chips are healthy again"
	case !admin:
		a.Change.Unschedulable = ptrBool(false)
	}
}

// setIf is "true" when v, else removes the annotation.
func setIf(v bool) *string {
	if v {
		return kube.Set(contract.True)
	}
	return nil
}

func boolString(v bool) string {
	if v {
		return contract.True
	}
	return contract.False
}
