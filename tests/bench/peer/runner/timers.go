package runner

import (
	"fmt"
	"math"
	"time"
)

// Timers are the fixed intervals of GPU Operator's upgrade controller and
// of the upgrade policy it hands to the library, at one time scale.
//
// Scaled: the planned requeue (upgrade_controller.go
// plannedRequeueInterval, 2 min), the rate limiter's retry bounds after a
// failed reconcile (minDelayCR 100 ms, maxDelayCR 3 s) and the policy's
// pod deletion and drain timeouts (300 s each, GPU Operator's defaults).
//
// Not scaled, because the peer does not own them:
//   - leader election (controller-runtime's 15 s lease, 10 s renew
//     deadline, 2 s retry; GPU Operator's chart passes only
//     --leader-elect). Scaled 1:30 the renew deadline would be 0.33 s and
//     the peer would lose its lease under load; npu-stack's rollout keeps
//     its 15 s lease unscaled too, and the report counts Lease writes
//     apart;
//   - the library's constants: its 1 s poll for its cache to show a node
//     write it just made (pkg/upgrade/node_upgrade_state_provider.go,
//     PollImmediateUntil(time.Second) within 10 s; the first look is
//     immediate) and its 600 s validation timeout
//     (validation_manager.go validationTimeoutSeconds, reached only by a
//     validator that never gets Ready);
//   - controller-runtime's cache resync (10 h), longer than any run.
type Timers struct {
	PlannedRequeue     time.Duration
	MinRetry, MaxRetry time.Duration
	// PodDeletionTimeout and DrainTimeout are whole seconds, as the
	// policy holds them (at least 1: 0 would mean "no timeout").
	PodDeletionTimeout, DrainTimeout int
}

// gpuOperatorPolicyTimeout is GPU Operator's default gpuPodDeletion and
// drain timeoutSeconds (deployments/gpu-operator/values.yaml).
const gpuOperatorPolicyTimeout = 300

// ScaledTimers multiplies every scaled interval by scale (0 < scale ≤ 1;
// 0 is taken as 1, real time).
func ScaledTimers(scale float64) (Timers, error) {
	if scale == 0 {
		scale = 1
	}
	if scale < 0 || scale > 1 || math.IsNaN(scale) {
		return Timers{}, fmt.Errorf("time scale %v: want a fraction in (0, 1] (1 = real time, 1/30 = a 10-minute node upgrade in 20 s)", scale)
	}
	dur := func(d time.Duration) time.Duration { return max(time.Duration(float64(d)*scale), time.Millisecond) }
	secs := func(s int) int { return max(int(math.Ceil(float64(s)*scale)), 1) }
	return Timers{
		PlannedRequeue:     dur(PlannedRequeue),
		MinRetry:           dur(minDelay),
		MaxRetry:           dur(maxDelay),
		PodDeletionTimeout: secs(gpuOperatorPolicyTimeout),
		DrainTimeout:       secs(gpuOperatorPolicyTimeout),
	}, nil
}
