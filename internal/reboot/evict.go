package reboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// NPUResourcePrefix is the prefix of the extended resources of NPU pods
// (huawei.com/Ascend910, huawei.com/Ascend310P, ...).
const NPUResourcePrefix = "huawei.com/"

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

// Eviction timing: how long to wait before asking again when a
// PodDisruptionBudget (429) or a terminating namespace refuses an
// eviction, and how often to look whether an evicted pod is gone.
const (
	evictRetryDelay = time.Second
	evictPollEvery  = time.Second
)

// EvictNPUPods evicts the NPU pods of a node through the eviction API
// (PodDisruptionBudgets honoured, DaemonSet pods left alone) and waits
// until they are gone or timeout passes. Only NPU pods are touched: the
// chips are what is broken, the node's other workloads keep running.
//
// It does what `kubectl drain --force --delete-emptydir-data
// --ignore-daemonsets` does for the pods it selects, without linking
// k8s.io/kubectl (which brings cli-runtime, kustomize and Go's plugin
// support into the binary: 40 MiB of a node agent that must stay small).
// A pod without a controller or with an emptyDir is evicted too: the
// workload cannot use the wedged chips anyway and must not hold the
// node's recovery hostage. Mirror pods and pods of an existing DaemonSet
// are left alone (the DaemonSet would recreate them at once); a pod of a
// DaemonSet that no longer exists is evicted.
func EvictNPUPods(ctx context.Context, client kubernetes.Interface, node string, timeout time.Duration, out io.Writer) error {
	if err := evictNPUPods(ctx, client, node, timeout, out); err != nil {
		return fmt.Errorf("evict NPU pods from node %s (a PodDisruptionBudget may forbid it; check `kubectl get pdb -A`): %w", node, err)
	}
	return nil
}

func evictNPUPods(ctx context.Context, client kubernetes.Interface, node string, timeout time.Duration, out io.Writer) error {
	pods, err := npuPodsToEvict(ctx, client, node, out)
	if err != nil || len(pods) == 0 {
		return err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	w := &syncWriter{w: out}
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i := range pods {
		wg.Go(func() { errs[i] = evictAndWait(ctx, client, pods[i], timeout, w) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// npuPodsToEvict lists the node's pods and keeps the NPU pods that an
// eviction may remove.
func npuPodsToEvict(ctx context.Context, client kubernetes.Interface, node string, out io.Writer) ([]corev1.Pod, error) {
	list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list the pods of node %s: %w", node, err)
	}
	var keep []corev1.Pod
	var errs []error
	for _, pod := range list.Items {
		if !IsNPUPod(&pod) {
			continue
		}
		if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		evict, err := daemonSetPodEvictable(ctx, client, &pod, out)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if evict {
			keep = append(keep, pod)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return keep, nil
}

// daemonSetPodEvictable reports whether pod may be evicted as far as
// DaemonSets go: a pod of no DaemonSet, a finished one or an orphan yes,
// a running pod of an existing DaemonSet no.
func daemonSetPodEvictable(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, out io.Writer) (bool, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "DaemonSet" || ref.APIVersion != "apps/v1" {
		return true, nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true, nil
	}
	_, err := client.AppsV1().DaemonSets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		_, _ = fmt.Fprintf(out, "ignoring DaemonSet-managed pod %s/%s\n", pod.Namespace, pod.Name)
		return false, nil
	case apierrors.IsNotFound(err):
		_, _ = fmt.Fprintf(out, "evicting pod %s/%s of DaemonSet %s, which no longer exists\n", pod.Namespace, pod.Name, ref.Name)
		return true, nil
	default:
		return false, fmt.Errorf("get DaemonSet %s/%s of pod %s: %w", pod.Namespace, ref.Name, pod.Name, err)
	}
}

// evictAndWait evicts pod, asking again while a PodDisruptionBudget
// refuses, and waits until it is gone (deleted, or replaced by a pod of
// the same name) or ctx ends.
func evictAndWait(ctx context.Context, client kubernetes.Interface, pod corev1.Pod, timeout time.Duration, out io.Writer) error {
	active := pod
evict:
	for {
		_, _ = fmt.Fprintf(out, "evicting pod %s/%s\n", active.Namespace, active.Name)
		err := client.PolicyV1().Evictions(active.Namespace).Evict(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: active.Name, Namespace: active.Namespace},
			DeleteOptions: &metav1.DeleteOptions{}, // the pod's own grace period
		})
		terminatingNS := apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)
		switch {
		case err == nil:
			break evict
		case apierrors.IsNotFound(err):
			return nil
		case terminatingNS && active.DeletionTimestamp != nil:
			// Deleted with its namespace: no eviction will ever pass,
			// and the pod goes anyway.
			break evict
		case apierrors.IsTooManyRequests(err) || terminatingNS:
			_, _ = fmt.Fprintf(out, "evicting pod %s/%s refused (will retry after %s): %v\n", active.Namespace, active.Name, evictRetryDelay, err)
			if !sleep(ctx, evictRetryDelay) {
				return fmt.Errorf("evict pod %s/%s: still refused when the eviction timeout (%s) ran out: %w", active.Namespace, active.Name, timeout, err)
			}
		default:
			return fmt.Errorf("evict pod %s/%s: %w", active.Namespace, active.Name, err)
		}
		// A failed read is left to the next eviction attempt.
		if fresh, getErr := client.CoreV1().Pods(active.Namespace).Get(ctx, active.Name, metav1.GetOptions{}); getErr == nil {
			active = *fresh
		}
	}
	if err := waitGone(ctx, client, active.Namespace, active.Name, active.UID); err != nil {
		return fmt.Errorf("wait for pod %s/%s to terminate after its eviction: %w", active.Namespace, active.Name, err)
	}
	_, _ = fmt.Fprintf(out, "pod %s/%s evicted\n", active.Namespace, active.Name)
	return nil
}

// waitGone polls until the pod named name with uid no longer exists.
func waitGone(ctx context.Context, client kubernetes.Interface, namespace, name string, uid types.UID) error {
	t := time.NewTicker(evictPollEvery)
	defer t.Stop()
	for {
		p, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || (err == nil && p.UID != uid):
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("still there: %w", context.Cause(ctx))
		case err != nil:
			return fmt.Errorf("get pod: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still there: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// syncWriter serialises the progress lines of concurrent evictions.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.w.Write(p)
	if err != nil {
		return n, fmt.Errorf("write eviction progress: %w", err)
	}
	return n, nil
}
