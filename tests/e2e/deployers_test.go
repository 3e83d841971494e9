package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// kstatusClient is Helm's client with the wait Flux's helm-controller
// (default poller) and Helm 4's --wait=watcher use: every rendered object
// must be kstatus Current before the post hooks run.
type kstatusClient struct {
	*kube.Client
	waited *int
}

func (c kstatusClient) Wait(rs kube.ResourceList, timeout time.Duration) error {
	return c.waitCurrent(rs, timeout)
}

func (c kstatusClient) WaitWithJobs(rs kube.ResourceList, timeout time.Duration) error {
	return c.waitCurrent(rs, timeout)
}

func (c kstatusClient) waitCurrent(rs kube.ResourceList, timeout time.Duration) error {
	*c.waited += len(rs)
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		for _, info := range rs {
			obj, err := resource.NewHelper(info.Client, info.Mapping).Get(info.Namespace, info.Name)
			if err != nil {
				last = fmt.Sprintf("%s %s: %v", info.Mapping.GroupVersionKind.Kind, info.Name, err)
				return false, nil
			}
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				return false, err
			}
			res, err := status.Compute(&unstructured.Unstructured{Object: m})
			if err != nil {
				return false, err
			}
			if res.Status != status.CurrentStatus {
				last = fmt.Sprintf("%s %s is %s: %s", info.Mapping.GroupVersionKind.Kind, info.Name, res.Status, res.Message)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("kstatus wait: %w (last: %s)", err, last)
	}
	return nil
}

// TestHelmWaitAndKstatusWaitNeverDeadlock: install with Helm 3's --wait,
// upgrade with a kstatus wait on every object before the post-upgrade
// rollout hook (Flux, Helm 4). The driver DaemonSet becomes Current
// without any reboot (the gate idles on the old driver), so the wait never
// blocks the hook that does the reboots. Afterwards nothing the chart
// rendered differs in the cluster: the rollout edits no object Helm owns.
func TestHelmWaitAndKstatusWaitNeverDeadlock(t *testing.T) {
	ctx := ctxTimeout(t, 12*time.Minute)
	s := newStack(t, "", "", 2, 1)
	if _, err := s.helm.Install(ctx, s.release, s.vals, testbed.InstallOptions{Wait: true}); err != nil {
		t.Fatalf("helm install --wait: %v", err)
	}
	s.check(ctx, v1, 0)
	s.setVersion(v2)
	waited := 0
	rel, err := s.helm.Upgrade(ctx, s.release, s.vals, testbed.InstallOptions{Wait: true,
		WrapKubeClient: func(c *kube.Client) kube.Interface { return kstatusClient{Client: c, waited: &waited} }})
	if err != nil {
		t.Fatalf("upgrade with a kstatus wait: %v", err)
	}
	if waited == 0 {
		t.Fatal("the kstatus wait was never used")
	}
	s.check(ctx, v2, 1)
	assertNoDrift(ctx, t, rel.Manifest)
}

// TestArgoCDSyncAndRollbackInJobMode applies the chart as Argo CD does:
// helm template, PreSync hooks (Helm pre-install/pre-upgrade), apply with
// prune, PostSync hooks (post-install/post-upgrade; post-rollback is
// ignored by Argo CD). With hooks.mode=job the rollout is a regular Job
// named by the driver spec, so a sync to the older revision rolls back.
func TestArgoCDSyncAndRollbackInJobMode(t *testing.T) {
	ctx := ctxTimeout(t, 12*time.Minute)
	s := newStack(t, "", "", 2, 1)
	s.vals["hooks"].(map[string]any)["mode"] = "job"
	a := newArgo(t, s)
	a.sync(ctx, 1)
	s.check(ctx, v1, 0)
	s.setVersion(v2)
	a.sync(ctx, 2)
	s.check(ctx, v2, 1)
	s.setVersion(v1)
	a.sync(ctx, 3) // "sync to the older revision"
	s.check(ctx, v1, 2)
	if a.postRollbackSeen {
		t.Error("post-rollback hooks must not be run under Argo CD")
	}
	assertNoDrift(ctx, t, a.lastManifest)
}

type argo struct {
	t                *testing.T
	s                *stack
	dyn              dynamic.Interface
	mapper           *restmapper.DeferredDiscoveryRESTMapper
	applied          map[string]*unstructured.Unstructured
	postRollbackSeen bool
	lastManifest     string
}

func newArgo(t *testing.T, s *stack) *argo {
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	return &argo{t: t, s: s, dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Client.Discovery())), applied: map[string]*unstructured.Unstructured{}}
}

func (a *argo) sync(ctx context.Context, rev int) {
	a.t.Helper()
	rel, err := a.s.helm.Render(ctx, a.s.release, a.s.vals)
	if err != nil {
		a.t.Fatal(err)
	}
	a.lastManifest = rel.Manifest
	var pre, post []*release.Hook
	for _, h := range rel.Hooks {
		for _, e := range h.Events {
			switch e {
			case release.HookPreInstall, release.HookPreUpgrade:
				pre = appendOnce(pre, h)
			case release.HookPostInstall, release.HookPostUpgrade:
				post = appendOnce(post, h)
			case release.HookPostRollback:
				if len(h.Events) == 1 {
					a.postRollbackSeen = true
				}
			}
		}
	}
	a.runHooks(ctx, pre)
	objs := decodeAll(a.t, rel.Manifest)
	current := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		a.apply(ctx, o)
		current[key(o)] = o
	}
	for k, o := range a.applied { // prune
		if _, ok := current[k]; !ok {
			ri := a.resource(o)
			if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil && !apierrors.IsNotFound(err) {
				a.t.Fatalf("prune %s: %v", k, err)
			}
		}
	}
	a.applied = current
	// Argo CD's sync completes once resources are healthy: for a Job
	// (the job-mode rollout) that means Complete.
	for _, o := range objs {
		if o.GetKind() == "Job" {
			a.waitJob(ctx, o.GetNamespace(), o.GetName(), rev)
		}
	}
	a.runHooks(ctx, post)
}

func appendOnce(hs []*release.Hook, h *release.Hook) []*release.Hook {
	for _, x := range hs {
		if x == h {
			return hs
		}
	}
	return append(hs, h)
}

func (a *argo) runHooks(ctx context.Context, hooks []*release.Hook) {
	a.t.Helper()
	sort.SliceStable(hooks, func(i, j int) bool { return hooks[i].Weight < hooks[j].Weight })
	var done []*unstructured.Unstructured
	for _, h := range hooks {
		for _, o := range decodeAll(a.t, h.Manifest) {
			ri := a.resource(o)
			// BeforeHookCreation, Argo CD's default delete policy.
			if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil && !apierrors.IsNotFound(err) {
				a.t.Fatal(err)
			}
			a.waitGone(ctx, o)
			if _, err := ri.Create(ctx, o, metav1.CreateOptions{}); err != nil {
				a.t.Fatalf("create hook %s: %v", key(o), err)
			}
			if o.GetKind() == "Job" {
				a.waitJob(ctx, o.GetNamespace(), o.GetName(), 0)
			}
			done = append(done, o)
		}
	}
	for _, o := range done {
		if strings.Contains(o.GetAnnotations()["helm.sh/hook-delete-policy"], "hook-succeeded") {
			_ = a.resource(o).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		}
	}
}

func (a *argo) apply(ctx context.Context, o *unstructured.Unstructured) {
	a.t.Helper()
	body, err := json.Marshal(o.Object)
	if err != nil {
		a.t.Fatal(err)
	}
	if _, err := a.resource(o).Patch(ctx, o.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "argocd-controller", Force: ptr.To(true)}); err != nil {
		a.t.Fatalf("apply %s: %v", key(o), err)
	}
}

func (a *argo) resource(o *unstructured.Unstructured) dynamic.ResourceInterface {
	a.t.Helper()
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version)
	if err != nil {
		a.t.Fatalf("map %s: %v", gvk, err)
	}
	if m.Scope.Name() == "namespace" {
		return a.dyn.Resource(m.Resource).Namespace(o.GetNamespace())
	}
	return a.dyn.Resource(m.Resource)
}

func (a *argo) waitGone(ctx context.Context, o *unstructured.Unstructured) {
	a.t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := a.resource(o).Get(ctx, o.GetName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		a.t.Fatalf("old hook %s not deleted: %v", key(o), err)
	}
}

func (a *argo) waitJob(ctx context.Context, ns, name string, rev int) {
	a.t.Helper()
	var got batchv1.JobConditionType
	err := testbed.WaitFor(ctx, testbed.JobLW(env.Client, ns, name), &batchv1.Job{}, func(js []*batchv1.Job) (bool, error) {
		if len(js) == 1 {
			got = testbed.JobFinished(js[0])
		}
		return got != "", nil
	})
	if err != nil || got != batchv1.JobComplete {
		a.t.Fatalf("sync %d: Job %s/%s finished %q: %v", rev, ns, name, got, err)
	}
}

func key(o *unstructured.Unstructured) string {
	return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
}

func decodeAll(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if err.Error() == "EOF" {
				return out
			}
			t.Fatalf("decode manifest: %v", err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// assertNoDrift: every field the chart rendered has the same value in the
// cluster (server defaults may add fields; nobody may change ours).
func assertNoDrift(ctx context.Context, t *testing.T, manifest string) {
	t.Helper()
	a := newArgo(t, nil)
	checked := 0
	for _, o := range decodeAll(t, manifest) {
		live, err := a.resource(o).Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s: %v", key(o), err)
			continue
		}
		want, got := normalize(t, o.Object), normalize(t, live.Object)
		for _, f := range []string{"spec", "data", "rules", "roleRef", "subjects"} {
			if w, ok := want[f]; ok {
				if path, ok := subset(w, got[f], f); !ok {
					t.Errorf("%s drifted at %s: rendered %v", key(o), path, w)
				}
			}
		}
		checked++
	}
	if checked < 10 {
		t.Fatalf("only %d objects checked for drift", checked)
	}
}

func normalize(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// subset reports whether want is contained in got; lists compare item by
// item. Resource quantities the server canonicalises ("1Gi" stays, 0.5
// becomes "500m") are compared as strings after the same JSON round trip.
func subset(want, got any, path string) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path, false
		}
		for k, v := range w {
			if p, ok := subset(v, g[k], path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return path, false
		}
		for i := range w {
			if p, ok := subset(w[i], g[i], path+"["+strconv.Itoa(i)+"]"); !ok {
				return p, false
			}
		}
		return "", true
	case float64:
		if g, ok := got.(string); ok {
			return path, g == strconv.FormatFloat(w, 'f', -1, 64)
		}
	}
	return path, reflect.DeepEqual(want, got)
}
