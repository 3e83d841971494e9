package reboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"

	"github.com/openfuyao/npu-stack/internal/kube"
)

// DefaultRecoveryDrainTimeout is how long a recovery drain waits for the
// NPU pods of a wedged node to terminate (recoveryPolicy.drainTimeoutSeconds).
const DefaultRecoveryDrainTimeout = 5 * time.Minute

// EvictNPUPods removes the NPU pods of a wedged node before its recovery
// reboot and waits until they are gone or timeout passes. It uses
// kubectl's drain library on its delete path (DisableEviction): each pod
// is deleted with its own grace period, DaemonSet pods are left alone.
// Only NPU pods are touched: the chips are what is broken, the node's
// other workloads keep running.
//
// Deletion, not the eviction API, for two reasons. PodDisruptionBudgets
// protect a workload's availability, and these pods have none left to
// protect: their chips are wedged, so a budget could only hold the
// recovery (and the slot it holds) hostage. And the rebooter may remove
// only pods on its own node, which the API server enforces with the
// chart's ValidatingAdmissionPolicy on pod DELETE (the pod's
// spec.nodeName must equal the node-name claim of the rebooter's token);
// an eviction names only the pod, so admission cannot see its node, and
// the rebooter's role grants pods delete, not pods/eviction.
//
// Force and DeleteEmptyDirData are set because the workload cannot use
// the wedged chips anyway: a pod without a controller or with an emptyDir
// must not hold the node's recovery hostage either.
//
// A process on a wedged chip often sits in uninterruptible sleep (D
// state): no signal ends it, its pod never finishes terminating, and only
// the reboot frees it. So the wait is bounded: the pods that were deleted
// and are still terminating at timeout are returned, and the reboot goes
// ahead (judgeDrain). Any other failure is an error.
func EvictNPUPods(ctx context.Context, client kubernetes.Interface, node string, timeout time.Duration, out io.Writer) (leftTerminating []string, err error) {
	h := &drain.Helper{
		Ctx:                 ctx,
		Client:              client,
		DisableEviction:     true,
		Force:               true,
		GracePeriodSeconds:  -1,
		IgnoreAllDaemonSets: true,
		DeleteEmptyDirData:  true,
		Timeout:             timeout,
		Out:                 out,
		ErrOut:              out,
		AdditionalFilters: []drain.PodFilter{func(pod corev1.Pod) drain.PodDeleteStatus {
			if kube.IsNPUPod(&pod) {
				return drain.MakePodDeleteStatusOkay()
			}
			return drain.MakePodDeleteStatusSkip()
		}},
	}
	drainErr := drain.RunNodeDrain(h, node)
	if drainErr == nil {
		return nil, nil
	}
	var remaining []corev1.Pod
	if timedOut(ctx, drainErr) {
		// What the drain would still delete: the pods it waited for.
		list, errs := h.GetPodsForDeletion(node)
		if len(errs) > 0 {
			return nil, fmt.Errorf("delete the NPU pods of node %s before its recovery reboot: %w; then listing the pods left failed: %w", node, drainErr, errors.Join(errs...))
		}
		remaining = list.Pods()
	}
	left, err := judgeDrain(drainErr, timedOut(ctx, drainErr), remaining)
	if err != nil {
		return nil, fmt.Errorf("delete the NPU pods of node %s before its recovery reboot: %w", node, err)
	}
	return left, nil
}

// timedOut reports whether the drain ended at its own timeout, not
// because the agent is shutting down.
func timedOut(ctx context.Context, err error) bool {
	return ctx.Err() == nil && (wait.Interrupted(err) || errors.Is(err, context.DeadlineExceeded))
}

// judgeDrain decides on a drain that returned drainErr. A drain that ran
// out of time while every pod it still waits for is terminating (deleted,
// deletionTimestamp set) goes on to the reboot, naming those pods: they
// are stuck on the wedged chip and only the reboot ends them. A pod that
// was never deleted, or any other failure, stops the reboot: that is a
// refusal (admission, RBAC) or an outage that a reboot would not explain.
func judgeDrain(drainErr error, timedOut bool, remaining []corev1.Pod) ([]string, error) {
	if drainErr == nil {
		return nil, nil
	}
	if !timedOut {
		return nil, drainErr
	}
	var left, notDeleted []string
	for _, p := range remaining {
		name := p.Namespace + "/" + p.Name
		if p.DeletionTimestamp == nil {
			notDeleted = append(notDeleted, name)
			continue
		}
		left = append(left, name)
	}
	if len(notDeleted) > 0 {
		return nil, fmt.Errorf("%w: pod(s) %v were not deleted", drainErr, notDeleted)
	}
	return left, nil
}
