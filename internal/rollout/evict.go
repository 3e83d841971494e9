package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"

	"github.com/openfuyao/npu-stack/internal/kube"
)

// evictRetryDelay is the pause before asking again for an eviction the API
// server refused.
const evictRetryDelay = time.Second

// evict removes pods from node with kubectl's drain library: evictions
// honour PodDisruptionBudgets, DaemonSet pods are left alone (the driver,
// the agents and the device plugin must stay), and the timeout bounds the
// whole step. The pod-deletion step (EvictNPUPods) removes NPU pods only
// and never refuses because of another pod; drain (EvictDrain) covers
// every pod its selector matches, with its own settings.
func evict(ctx context.Context, client kubernetes.Interface, node string, kind EvictKind, p Policy, log io.Writer) error {
	h, err := helper(ctx, client, kind, p, log)
	if err != nil {
		return err
	}
	list, errs := h.GetPodsForDeletion(node)
	if len(errs) > 0 {
		return blocked(node, kind, errs)
	}
	if w := list.Warnings(); w != "" {
		_, _ = fmt.Fprintf(log, "node %s: %s\n", node, w)
	}
	pods := list.Pods()
	if len(pods) == 0 {
		return nil
	}
	if err := h.DeleteOrEvictPods(pods); err != nil {
		names := make([]string, 0, len(pods))
		for _, p := range pods {
			names = append(names, p.Namespace+"/"+p.Name)
		}
		return fmt.Errorf("remove pods %s from node %s: %w", strings.Join(names, ", "), node, err)
	}
	return nil
}

// CheckEvictable reports, without evicting, why the rollout's eviction
// step of kind would refuse the pods on node (unmanaged pods without
// force, emptyDir data without deleteEmptyDir); nil when it would not.
func CheckEvictable(ctx context.Context, client kubernetes.Interface, node string, kind EvictKind, p Policy) error {
	h, err := helper(ctx, client, kind, p, io.Discard)
	if err != nil {
		return err
	}
	if _, errs := h.GetPodsForDeletion(node); len(errs) > 0 {
		return blocked(node, kind, errs)
	}
	return nil
}

func blocked(node string, kind EvictKind, errs []error) error {
	step, key := StepPodDeletion, "driver.upgradePolicy."+policyKey(kind)
	if kind == EvictDrain {
		step = StepDrain
	}
	return fmt.Errorf("pods on node %s cannot be removed by the %s step: %w (set %s.force or %s.deleteEmptyDir if that is acceptable, or stop them first)",
		node, step, errors.Join(errs...), key, key)
}

func helper(ctx context.Context, client kubernetes.Interface, kind EvictKind, p Policy, log io.Writer) (*drain.Helper, error) {
	h := &drain.Helper{
		Ctx:                ctx,
		Client:             client,
		GracePeriodSeconds: -1,
		// Unset, drain retries a refused eviction (a PodDisruptionBudget) at
		// once, as fast as the client's rate limiter lets it.
		EvictErrorRetryDelay: evictRetryDelay,
		IgnoreAllDaemonSets:  true,
		Out:                  log,
		ErrOut:               log,
	}
	switch kind {
	case EvictNPUPods:
		// drain runs its own filters before AdditionalFilters and stops at
		// the first refusal, so with the policy's force and deleteEmptyDir
		// set on the Helper a bare or emptyDir pod that uses no NPU would
		// be refused before the NPU filter could skip it, failing the node
		// for a pod this step never removes. drain's filters are therefore
		// made permissive (they still leave DaemonSet, mirror and deleted
		// pods alone) and the policy is applied by npuPodFilter, to NPU
		// pods only.
		h.Force, h.Timeout, h.DeleteEmptyDirData = true, p.PodDeletion.Timeout, true
		pol := p.PodDeletion
		h.AdditionalFilters = []drain.PodFilter{func(pod corev1.Pod) drain.PodDeleteStatus { return npuPodFilter(pod, pol) }}
	case EvictDrain:
		h.Force, h.Timeout, h.DeleteEmptyDirData = p.Drain.Force, p.Drain.Timeout, p.Drain.DeleteEmptyDir
		h.PodSelector = p.Drain.Selector
	default:
		return nil, fmt.Errorf("unknown eviction kind %q", kind)
	}
	return h, nil
}

// Refusals of the pod-deletion step; drain.Helper reports each as
// "cannot delete <message>: <namespace/pod>, ...".
const (
	npuUnmanagedRefusal = "NPU pods that declare no controller, which would not come back (set driver.upgradePolicy.npuPodDeletion.force=true to delete them anyway)"
	npuEmptyDirRefusal  = "NPU pods with emptyDir data, which would be lost (set driver.upgradePolicy.npuPodDeletion.deleteEmptyDir=true to delete them anyway)"
	npuUnmanagedWarning = "deleting NPU pods that declare no controller"
	npuEmptyDirWarning  = "deleting NPU pods with emptyDir data"
)

// npuPodFilter decides what the pod-deletion step does with pod under
// policy p: pods not using an NPU are skipped whatever they are (only
// drain, when enabled, touches them, with its own settings); NPU pods
// get drain's rules with npuPodDeletion's force and deleteEmptyDir.
// drain's own filters have run before it, so a pod that reaches it with
// a DaemonSet controller is an orphan (live DaemonSet pods were skipped)
// and, as in drain, needs force.
func npuPodFilter(pod corev1.Pod, p EvictPolicy) drain.PodDeleteStatus {
	if !kube.IsNPUPod(&pod) {
		return drain.MakePodDeleteStatusSkip()
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return drain.MakePodDeleteStatusOkay() // finished: nothing to lose
	}
	var warnings []string
	if ref := metav1.GetControllerOf(&pod); ref == nil || ref.Kind == "DaemonSet" {
		if !p.Force {
			return drain.MakePodDeleteStatusWithError(npuUnmanagedRefusal)
		}
		warnings = append(warnings, npuUnmanagedWarning)
	}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil {
			continue
		}
		if !p.DeleteEmptyDir {
			return drain.MakePodDeleteStatusWithError(npuEmptyDirRefusal)
		}
		warnings = append(warnings, npuEmptyDirWarning)
		break
	}
	if len(warnings) > 0 {
		return drain.MakePodDeleteStatusWithWarning(true, strings.Join(warnings, "; "))
	}
	return drain.MakePodDeleteStatusOkay()
}
