package contract

// A node's cordon may be held by two owners at once: the rollout (from
// cordon-required until the node is done, and in upgrade-failed after
// the reboot was asked for) and a recovery reboot (recovery-cordoned).
// Each records on the Node whether an admin had cordoned the node before
// it; an owner that takes a node already held by the other copies the
// other's record instead of reading the cordon it sees, so that the
// record always means "cordoned by an admin". The last owner to let go
// uncordons, unless an admin had cordoned it.

// Failure steps at which the rollout has not yet asked for a reboot: a
// node failing there is given back (uncordoned unless an admin cordoned
// it), so the rollout no longer holds its cordon.
const (
	StepWaitForJobs = "wait-for-jobs"
	StepPodDeletion = "pod-deletion"
	StepDrain       = "drain"
)

// FailedBeforeReboot reports whether an upgrade-failed node failed at a
// step before its reboot was asked for.
func FailedBeforeReboot(step string) bool {
	return step == StepWaitForJobs || step == StepPodDeletion || step == StepDrain
}

// CordonOwners is who holds a node's cordon, read from its labels and
// annotations.
type CordonOwners struct {
	// Upgrade: the rollout holds the cordon.
	Upgrade bool
	// Recovery: a recovery reboot holds the cordon.
	Recovery bool
	// ByAdmin: the node was cordoned before the first owner took it; no
	// owner uncordons it. With both owners holding, both records must say
	// so: a record of "cordoned" written by an older version that saw the
	// other owner's cordon must not keep the node cordoned for ever.
	ByAdmin bool
}

// Cordon reads the owners of a node's cordon.
func (k Keys) Cordon(labels, annotations map[string]string) CordonOwners {
	var c CordonOwners
	st, known := ParseUpgradeState(labels[k.UpgradeState()])
	switch {
	case !known:
		// A state this version does not know: the rollout that wrote it
		// holds the node.
		c.Upgrade = true
	case st == StateFailed:
		c.Upgrade = !FailedBeforeReboot(annotations[k.UpgradeFailureStep()])
	default:
		c.Upgrade = st.InProgress()
	}
	c.Recovery = annotations[k.RecoveryCordoned()] == True
	upgradeAdmin := annotations[k.UpgradeWasCordoned()] == True
	recoveryAdmin := annotations[k.RecoveryWasCordoned()] == True
	switch {
	case c.Upgrade && c.Recovery:
		c.ByAdmin = upgradeAdmin && recoveryAdmin
	case c.Recovery:
		c.ByAdmin = recoveryAdmin
	case c.Upgrade:
		c.ByAdmin = upgradeAdmin
	}
	return c
}
