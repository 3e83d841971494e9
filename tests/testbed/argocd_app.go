package testbed

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// WaitApplication watches Application name in Argo CD's namespace until
// cond holds for it and returns it. On timeout the error carries cond's
// last error and the Application's state (ApplicationState).
func (a *ArgoCD) WaitApplication(ctx context.Context, name string, cond func(*unstructured.Unstructured) (bool, error)) (*unstructured.Unstructured, error) {
	dyn, err := dynamic.NewForConfig(a.cp.Config())
	if err != nil {
		return nil, fmt.Errorf("client for Applications: %w", err)
	}
	apps := dyn.Resource(ApplicationGVR).Namespace(a.Namespace())
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return apps.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return apps.Watch(ctx, o)
		},
	}
	var got *unstructured.Unstructured
	var last error
	err = WaitFor(ctx, lw, &unstructured.Unstructured{}, func(as []*unstructured.Unstructured) (bool, error) {
		if len(as) != 1 {
			return false, nil
		}
		got = as[0]
		ok, err := cond(got)
		last = err
		return ok, nil
	})
	if err != nil {
		state := "no Application"
		if got != nil {
			state = ApplicationState(got)
		}
		return got, fmt.Errorf("waiting for Application %s/%s: %w; last seen: %s", a.Namespace(), name, errors.Join(err, last), state)
	}
	return got, nil
}

// ApplicationState sums up Argo CD's verdict on an Application: sync
// status and revision, health, the last operation and the conditions.
func ApplicationState(a *unstructured.Unstructured) string {
	s := func(f ...string) string { v, _, _ := unstructured.NestedString(a.Object, f...); return v }
	conds, _, _ := unstructured.NestedSlice(a.Object, "status", "conditions")
	hist, _, _ := unstructured.NestedSlice(a.Object, "status", "history")
	// Per-resource health is not in status.resources: Argo CD 3 keeps it
	// in redis unless --persist-resource-health.
	return fmt.Sprintf("sync %s at %q, health %s (%s), operation %s (%s), history %d, conditions %v",
		s("status", "sync", "status"), s("status", "sync", "revision"), s("status", "health", "status"), s("status", "health", "message"),
		s("status", "operationState", "phase"), s("status", "operationState", "message"), len(hist), conds)
}
