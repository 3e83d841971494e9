package reboot

import (
	"context"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"

	"github.com/openfuyao/npu-stack/internal/kube"
)

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
func EvictNPUPods(ctx context.Context, client kubernetes.Interface, node string, timeout time.Duration, out io.Writer) error {
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
	if err := drain.RunNodeDrain(h, node); err != nil {
		return fmt.Errorf("delete the NPU pods of node %s before its recovery reboot: %w", node, err)
	}
	return nil
}
