package inflight

// PeerInProgress is whether a node whose upgrade-state label (NVIDIA's
// k8s-operator-libs, nvidia.com/gpu-driver-upgrade-state) is state counts
// against the library's maxParallelUpgrades: GetUpgradesInProgress
// (pkg/upgrade/common_manager.go) counts the nodes it manages less those
// with no state, upgrade-done or upgrade-required, so upgrade-failed and
// every step between counts. The benchmark reads the label from its own
// node watch; the library counts from its BuildState, which leaves out a
// node whose driver pod has no node yet (pkg/upgrade/upgrade_state.go:
// "Driver Pod has no NodeName, skipping"), as a replacement pod is until
// the scheduler binds it. Such a node is in progress here. (The
// maintenance-operator states of the library's requestor mode, which the
// peer does not run, are not among its managed nodes.)
func PeerInProgress(state string) bool {
	switch state {
	case "", "upgrade-done", "upgrade-required", "node-maintenance-required", "post-maintenance-required":
		return false
	}
	return true
}
