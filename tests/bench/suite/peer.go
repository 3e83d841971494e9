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
	"The peer is NVIDIA's upgrade state machine (k8s-operator-libs pkg/upgrade) in its own process (tests/bench/peer, its own Go module), driven as GPU Operator's upgrade controller drives it: a controller-runtime manager with leader election; one reconcile at a time of a single request, enqueued by a Node change of the library's upgrade-state or skip label and by a driver DaemonSet generation change; each reconcile BuildState then ApplyState with the policy, then a requeue after 2 minutes (failed reconciles retried after 100 ms to 3 s); pod deletion enabled with GPU Operator's filter (pods using the accelerator), validation enabled (app=nvidia-operator-validator), the restart-only predicate on the driver config digest (a version bump changes it: the full flow).",
	"The scenario sets the peer's maxParallelUpgrades and maxUnavailable (as npu-stack's); the rest is GPU Operator's default: autoUpgrade true; waitForCompletion podSelector empty, timeout 0; gpuPodDeletion force false, timeoutSeconds 300, deleteEmptyDir false; drain enable false, force false, timeoutSeconds 300, deleteEmptyDir false, podSelector nvidia.com/gpu-driver-upgrade-drain.skip!=true; the library's validation timeout (600 s); client-side rate limiting off (controller-runtime's default).",
	"The peer's fleet: a driver DaemonSet with the OnDelete strategy and a validator DaemonSet on every node, beside the chart's. The library deletes a node's driver pod; the simulated node holds the replacement not Ready for the per-node time (the driver reload) and the validator not Ready from the old pod's deletion until the new one is Ready. The peer's wall runs from the driver DaemonSet's template change to every node upgrade-done, schedulable and running a Ready driver pod of the new version; its requests are counted by the same proxy from the change on. Before the change the peer has reconciled once with every node upgrade-done, so its first planned requeue comes 2 minutes after that reconcile.",
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
