package testbed_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// argoWaitApp waits for cond on the Application, failing the test with
// its state on timeout.
func argoWaitApp(ctx context.Context, t *testing.T, argo *testbed.ArgoCD, name, what string, cond func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	got, err := argo.WaitApplication(ctx, name, func(a *unstructured.Unstructured) (bool, error) { return cond(a), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	t.Logf("%s: %s", what, testbed.ApplicationState(got))
	return got
}

// argoSynced: Argo CD's own verdict that the chart at version is applied and
// healthy and that the last operation succeeded.
func argoSynced(a *unstructured.Unstructured, version string) bool {
	s := func(f ...string) string { v, _, _ := unstructured.NestedString(a.Object, f...); return v }
	return s("status", "sync", "status") == "Synced" && s("status", "sync", "revision") == version &&
		s("status", "health", "status") == "Healthy" && s("status", "operationState", "phase") == "Succeeded"
}

func argoHistory(a *unstructured.Unstructured) []any {
	h, _, _ := unstructured.NestedSlice(a.Object, "status", "history")
	return h
}

// argoCheckHooks: the chart's Helm hooks ran as Argo CD sync hooks, the
// pre-install/pre-upgrade ones (preflight and its RBAC) as PreSync, and
// all succeeded; with hooks.mode=job there is no PostSync hook.
func argoCheckHooks(t *testing.T, a *unstructured.Unstructured, what string) {
	t.Helper()
	res, _, _ := unstructured.NestedSlice(a.Object, "status", "operationState", "syncResult", "resources")
	var hooks []string
	preflight := false
	for _, r := range res {
		m := r.(map[string]any)
		ht, _ := m["hookType"].(string)
		if ht == "" {
			continue
		}
		hooks = append(hooks, fmt.Sprintf("%s %s/%s: %v %v", ht, m["kind"], m["name"], m["hookPhase"], m["message"]))
		if m["hookPhase"] != "Succeeded" {
			t.Errorf("%s: hook %s/%s (%s) ended %v: %v", what, m["kind"], m["name"], ht, m["hookPhase"], m["message"])
		}
		if ht != "PreSync" {
			t.Errorf("%s: hook %s/%s ran as %s; the chart has only pre-install/pre-upgrade hooks in job mode", what, m["kind"], m["name"], ht)
		}
		if m["kind"] == "Job" && strings.HasSuffix(m["name"].(string), "-preflight") {
			preflight = true
		}
	}
	t.Logf("%s hooks:\n  %s", what, strings.Join(hooks, "\n  "))
	// before-hook-creation only: the preflight Job stays after success.
	ns, _, _ := unstructured.NestedString(a.Object, "spec", "destination", "namespace")
	job, err := env.Client.BatchV1().Jobs(ns).Get(context.Background(), "npu-stack-preflight", metav1.GetOptions{})
	if err != nil {
		t.Errorf("%s: preflight Job: %v", what, err)
	} else if testbed.JobFinished(job) != batchv1.JobComplete {
		t.Errorf("%s: preflight Job not complete: %+v", what, job.Status)
	}
	if !preflight {
		t.Errorf("%s: the preflight Job did not run as a PreSync hook", what)
	}
}

// argoCheckApplied gets every resource Argo CD lists for the Application from
// the API server: each exists and carries Argo CD's tracking annotation.
func argoCheckApplied(ctx context.Context, t *testing.T, dyn dynamic.Interface, a *unstructured.Unstructured) {
	t.Helper()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Client.Discovery()))
	res, _, _ := unstructured.NestedSlice(a.Object, "status", "resources")
	kinds := map[string]int{}
	for _, r := range res {
		m := r.(map[string]any)
		if hook, _ := m["hook"].(bool); hook {
			// Hooks: checkHooks; those deleted on success may still be
			// listed until the next refresh.
			continue
		}
		group, _ := m["group"].(string)
		version, _ := m["version"].(string)
		kind, _ := m["kind"].(string)
		ns, _ := m["namespace"].(string)
		name, _ := m["name"].(string)
		mapping, err := mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind}, version)
		if err != nil {
			t.Errorf("%s %s: %v", kind, name, err)
			continue
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if ns != "" {
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		obj, err := ri.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			t.Errorf("Argo CD lists %s %s/%s but it is not in the cluster", kind, ns, name)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if id := obj.GetAnnotations()["argocd.argoproj.io/tracking-id"]; !strings.HasPrefix(id, a.GetName()+":") {
			t.Errorf("%s %s/%s: tracking-id %q, want it to name Application %s", kind, ns, name, id, a.GetName())
		}
		kinds[kind]++
		if kind == "DaemonSet" {
			// Exactly one NPU node in the fleet: each node agent runs there.
			desired, _, _ := unstructured.NestedInt64(obj.Object, "status", "desiredNumberScheduled")
			ready, _, _ := unstructured.NestedInt64(obj.Object, "status", "numberReady")
			if desired != 1 || ready != 1 {
				t.Errorf("DaemonSet %s/%s: %d of %d pods ready, want 1 of 1", ns, name, ready, desired)
			}
		}
		if kind == "Job" {
			succeeded, _, _ := unstructured.NestedInt64(obj.Object, "status", "succeeded")
			t.Logf("Job %s/%s: succeeded=%d", ns, name, succeeded)
		}
	}
	t.Logf("applied: %v", kinds)
	for _, k := range []string{"DaemonSet", "Job", "ServiceAccount", "ClusterRole", "ValidatingAdmissionPolicy"} {
		if kinds[k] == 0 {
			t.Errorf("no %s among the Application's resources %v", k, kinds)
		}
	}
}

// argoProbeInterval is the --probe-interval of the health-watch in the
// Application's driver DaemonSet.
func argoProbeInterval(ctx context.Context, t *testing.T, dyn dynamic.Interface, a *unstructured.Unstructured) string {
	t.Helper()
	res, _, _ := unstructured.NestedSlice(a.Object, "status", "resources")
	for _, r := range res {
		m := r.(map[string]any)
		if m["kind"] != "DaemonSet" {
			continue
		}
		ds, err := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}).
			Namespace(m["namespace"].(string)).Get(ctx, m["name"].(string), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
			if i := slices.IndexFunc(args, func(s string) bool { return strings.HasPrefix(s, "--probe-interval=") }); i >= 0 {
				return strings.TrimPrefix(args[i], "--probe-interval=")
			}
		}
	}
	t.Fatal("no driver DaemonSet with a health-watch --probe-interval among the Application's resources")
	return ""
}
