package reboot

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"
)

// NPUResourcePrefix is the prefix of the extended resources of NPU pods
// (huawei.com/Ascend910, huawei.com/Ascend310P, ...).
const NPUResourcePrefix = "huawei.com/"

// evictRetryDelay is the pause before asking again for an eviction the API
// server refused.
const evictRetryDelay = time.Second

// IsNPUPod reports whether pod requests an NPU resource in any container.
func IsNPUPod(pod *corev1.Pod) bool {
	var ctrs []corev1.Container
	ctrs = append(ctrs, pod.Spec.InitContainers...)
	ctrs = append(ctrs, pod.Spec.Containers...)
	for _, c := range ctrs {
		for _, list := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
			for name := range list {
				if strings.HasPrefix(string(name), NPUResourcePrefix) {
					return true
				}
			}
		}
	}
	return false
}

// EvictNPUPods evicts the NPU pods of a node through the eviction API
// (PodDisruptionBudgets honoured, DaemonSet pods left alone) and waits
// until they are gone or timeout passes. Only NPU pods are touched: the
// chips are what is broken, the node's other workloads keep running.
//
// Force and DeleteEmptyDirData are set because the workload cannot use
// the wedged chips anyway: a pod without a controller or with an emptyDir
// must not hold the node's recovery hostage.
func EvictNPUPods(ctx context.Context, client kubernetes.Interface, node string, timeout time.Duration, out io.Writer) error {
	h := &drain.Helper{
		Ctx:                 ctx,
		Client:              client,
		Force:               true,
		GracePeriodSeconds:  -1,
		IgnoreAllDaemonSets: true,
		DeleteEmptyDirData:  true,
		Timeout:             timeout,
		// Unset, drain retries a refused eviction (a PodDisruptionBudget) at
		// once, as fast as the client's rate limiter lets it.
		EvictErrorRetryDelay: evictRetryDelay,
		Out:                  out,
		ErrOut:               out,
		AdditionalFilters: []drain.PodFilter{func(pod corev1.Pod) drain.PodDeleteStatus {
			if IsNPUPod(&pod) {
				return drain.MakePodDeleteStatusOkay()
			}
			return drain.MakePodDeleteStatusSkip()
		}},
	}
	if err := drain.RunNodeDrain(h, node); err != nil {
		return fmt.Errorf("evict NPU pods from node %s (a PodDisruptionBudget may forbid it; check `kubectl get pdb -A`): %w", node, err)
	}
	return nil
}
