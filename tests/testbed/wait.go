package testbed

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// WaitFor watches the objects lw lists and returns once cond holds for the
// whole current set. It reacts to watch events, never a polling interval;
// on timeout the error carries cond's last verdict.
func WaitFor[T runtime.Object](ctx context.Context, lw cache.ListerWatcher, example T, cond func([]T) (bool, error)) error {
	result := make(chan error, 1)
	var store cache.Store
	snapshot := func() []T {
		items := store.List()
		typed := make([]T, 0, len(items))
		for _, it := range items {
			typed = append(typed, it.(T))
		}
		return typed
	}
	check := func() {
		ok, err := cond(snapshot())
		if err != nil || ok {
			select {
			case result <- err:
			default:
			}
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { check() },
		UpdateFunc: func(any, any) { check() },
		DeleteFunc: func(any) { check() },
	}
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: example, Handler: handler})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go ctrl.RunWithContext(runCtx)
	if !cache.WaitForCacheSync(runCtx.Done(), ctrl.HasSynced) {
		return fmt.Errorf("watch did not sync: %w", ctx.Err())
	}
	check() // the condition may hold for an empty or unchanged set
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		if _, lastErr := cond(snapshot()); lastErr != nil {
			return fmt.Errorf("%w: %w", ctx.Err(), lastErr)
		}
		return fmt.Errorf("condition not met: %w", ctx.Err())
	}
}

// PodsLW lists the pods of a namespace matching a label selector.
func PodsLW(client kubernetes.Interface, namespace, selector string) cache.ListerWatcher {
	lw := cache.NewFilteredListWatchFromClient(client.CoreV1().RESTClient(), "pods", namespace, func(o *metav1.ListOptions) { o.LabelSelector = selector })
	return lw
}

// JobLW watches one Job.
func JobLW(client kubernetes.Interface, namespace, name string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(client.BatchV1().RESTClient(), "jobs", namespace, fields.OneTermEqualSelector("metadata.name", name))
}

// JobFinished returns the Job's terminal condition type (Complete or
// Failed), or "" while it runs.
func JobFinished(j *batchv1.Job) batchv1.JobConditionType {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.Type
		}
	}
	return ""
}

// NodesLW lists the nodes matching a label selector.
func NodesLW(client kubernetes.Interface, selector string) cache.ListerWatcher {
	return cache.NewFilteredListWatchFromClient(client.CoreV1().RESTClient(), "nodes", "", func(o *metav1.ListOptions) { o.LabelSelector = selector })
}
