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

// evictRetryDelay is the pause before asking again for an eviction the API
// server refused.
const evictRetryDelay = time.Second

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
			if kube.IsNPUPod(&pod) {
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
