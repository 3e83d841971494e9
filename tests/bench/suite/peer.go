package suite

import (
	"context"
	"fmt"

	"github.com/openfuyao/npu-stack/tests/bench/peerrun"
	"github.com/openfuyao/npu-stack/tests/bench/report"
)

// peerNotes describe how the peer is driven and which of its settings are
// GPU Operator's defaults rather than the scenario's.
var peerNotes = []string{
	"The peer is NVIDIA's upgrade state machine (k8s-operator-libs pkg/upgrade, the version GPU Operator's go.mod pins, with controller-runtime v0.24.1 as there) in its own process (tests/bench/peer, its own Go module), driven as GPU Operator's upgrade controller drives it (gpu-operator controllers/upgrade_controller.go, cmd/gpu-operator/main.go): a controller-runtime manager with leader election (--leader-elect, controller-runtime's 15 s lease, 10 s renew deadline, 2 s retry); one reconcile at a time of a single request, enqueued by a Node change of the library's upgrade-state or skip label and by a driver DaemonSet generation change; each reconcile BuildState then ApplyState with the policy, then the planned requeue (2 min in real time); failed reconciles retried after 100 ms to 3 s; pod deletion enabled with GPU Operator's filter (pods using the accelerator), validation enabled (app=nvidia-operator-validator), the restart-only predicate on the driver config digest (a version bump changes it: the full flow).",
	"Time scale: the peer's planned requeue, retry bounds and policy timeouts (pod deletion, drain: 300 s) are multiplied by the scenario's time scale, as its per-node time is. Not scaled: leader election (scaled 1:30 its renew deadline would be 0.33 s; npu-stack's lease is not scaled either, and Lease writes are counted apart), the library's own constants (its 1 s poll for its cache to show a node write it just made, pkg/upgrade/node_upgrade_state_provider.go, whose first look is immediate; its 600 s validation timeout, reached only by a validator never Ready), and the cache resync (10 h).",
	"The scenario sets the peer's maxParallelUpgrades and maxUnavailable (as npu-stack's); the rest is GPU Operator's default (deployments/gpu-operator/values.yaml): autoUpgrade true; waitForCompletion podSelector empty, timeout 0; gpuPodDeletion force false, timeoutSeconds 300, deleteEmptyDir false; drain enable false, force false, timeoutSeconds 300, deleteEmptyDir false, podSelector nvidia.com/gpu-driver-upgrade-drain.skip!=true; client-side rate limiting off (controller-runtime's default).",
	"The peer's fleet: a driver DaemonSet with the OnDelete strategy and a validator DaemonSet on every node (npu-stack's N healthy nodes, or N nodes of its own with the same ordinary pods where the table says so). The library deletes a node's driver pod; the simulated node holds the replacement not Ready for the per-node time (the driver reload) and the validator not Ready from the old pod's deletion until the new one is Ready. Before its first upgrade the peer has run once until every node was upgrade-done (the steady state of a fleet GPU Operator manages) and was stopped; each upgrade starts npu-peer and bumps the driver DaemonSet at the clock's start, so its start-up is inside its wall as npu-stack's rollout's is inside npu-stack's.",
	"Per-node time and nodes in progress: on both sides the simulated per-node time starts once the side's own steps before it are done (npu-stack: admission, cordon, drain, the reboot command; the peer: admission, cordon, pod deletion, the driver pod's deletion and its replacement bound) and ends with the new driver's pod Ready; validation, uncordon and the wait for a reconcile to notice are in the node's cycle. A node is in progress while the benchmark's node watch sees its upgrade-state label in a state the side's maxParallelUpgrades counts (npu-stack: every state but none, upgrade-required and upgrade-failed; the peer: as the library's GetUpgradesInProgress, pkg/upgrade/common_manager.go, every state but none, upgrade-done and upgrade-required); the physical limit ceil(N/p) × t holds only for a side that never had more than p. The library counts from the driver pods it lists and BuildState (pkg/upgrade/upgrade_state.go) skips a pod with no node name, as a replacement driver pod is until the scheduler binds it, so a reconcile in that window can start one more node than maxParallelUpgrades.",
}

// peerFor builds npu-peer if a fleet of the plan runs the peer, and
// records the library in the report.
func peerFor(ctx context.Context, p Plan, r *report.Report) (string, error) {
	need := false
	for _, f := range p.Fleets {
		need = need || hasPeer(f, "x") != ""
	}
	if !need {
		return "", nil
	}
	lib, err := peerrun.Library()
	if err != nil {
		return "", err
	}
	bin, err := peerrun.Binary(ctx)
	if err != nil {
		return "", fmt.Errorf("the peer: %w", err)
	}
	r.PeerLibrary = lib
	r.Notes = append(r.Notes, peerNotes...)
	return bin, nil
}

// hasPeer is bin if a scenario of f runs the peer, else "".
func hasPeer(f Fleet, bin string) string {
	for _, s := range f.Specs {
		if s.Peer {
			return bin
		}
	}
	return ""
}
