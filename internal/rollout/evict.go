package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
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
// whole step.
func evict(ctx context.Context, client kubernetes.Interface, node string, kind EvictKind, p Policy, log io.Writer) error {
	h, err := helper(ctx, client, kind, p, log)
	if err != nil {
		return err
	}
	list, errs := h.GetPodsForDeletion(node)
	if len(errs) > 0 {
		return blocked(node, errs)
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
		return blocked(node, errs)
	}
	return nil
}

func blocked(node string, errs []error) error {
	return fmt.Errorf("pods on node %s cannot be removed: %w (set force or deleteEmptyDir in driver.upgradePolicy if that is acceptable, or stop them first)", node, errors.Join(errs...))
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
		h.Force, h.Timeout, h.DeleteEmptyDirData = p.PodDeletion.Force, p.PodDeletion.Timeout, p.PodDeletion.DeleteEmptyDir
		h.AdditionalFilters = []drain.PodFilter{func(pod corev1.Pod) drain.PodDeleteStatus {
			if kube.IsNPUPod(&pod) {
				return drain.MakePodDeleteStatusOkay()
			}
			return drain.MakePodDeleteStatusSkip()
		}}
	case EvictDrain:
		h.Force, h.Timeout, h.DeleteEmptyDirData = p.Drain.Force, p.Drain.Timeout, p.Drain.DeleteEmptyDir
		h.PodSelector = p.Drain.Selector
	default:
		return nil, fmt.Errorf("unknown eviction kind %q", kind)
	}
	return h, nil
}
