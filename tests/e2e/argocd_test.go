package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestArgoCDStory: Argo CD v3.6 (application controller, repo server
// rendering with helm v4, redis) syncs docs/examples/argocd-application.yaml's
// Application, its chart from the test bed's registry and the fleet's
// values merged over the example's (hooks.mode: job). The bump and the
// rollback are changes of valuesObject, as a Git commit and its revert
// would be; automated sync with prune and self-heal applies each.
func TestArgoCDStory(t *testing.T) {
	s := newStack(t, "", "", 2, 1)
	ctx := ctxTimeout(t, 3*time.Minute)
	argo, err := env.StartArgoCD(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	apps := dyn.Resource(testbed.ApplicationGVR).Namespace(argo.Namespace())
	d := &argoDeployer{s: s, argo: argo, apps: apps}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range argo.LogPaths() {
				t.Logf("%s:\n%s", p, testbed.Tail(readFile(p), 40))
			}
		}
		// The Applications go first, so that nothing syncs into a
		// namespace being torn down, and Argo CD stops.
		for _, name := range d.created {
			_ = apps.Delete(context.Background(), name, metav1.DeleteOptions{})
		}
		_ = argo.Stop()
	})
	runStory(t, s, d)
}

type argoDeployer struct {
	s       *stack
	argo    *testbed.ArgoCD
	apps    dynamic.ResourceInterface
	first   map[string]any // the install's values: the rollback's target
	syncs   int            // full syncs the story expects in status.history
	created []string
}

// exampleApplication is the example file's Application for chart at
// version, deploying into the stack's namespace, named name.
func (d *argoDeployer) exampleApplication(t *testing.T, name, chart, version string) *unstructured.Unstructured {
	t.Helper()
	app := exampleObject(t, "argocd-application.yaml", "Application")
	app.SetName(name)
	app.SetNamespace(d.argo.Namespace())
	spec := app.Object["spec"].(map[string]any)
	src := spec["source"].(map[string]any)
	src["repoURL"], src["chart"], src["targetRevision"] = d.argo.ChartRepoURL(), chart, version
	src["helm"].(map[string]any)["releaseName"] = name
	spec["destination"].(map[string]any)["namespace"] = d.s.ns
	return app
}

func (d *argoDeployer) create(ctx context.Context, t *testing.T, app *unstructured.Unstructured) {
	t.Helper()
	if _, err := d.apps.Create(ctx, app, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.created = append(d.created, app.GetName())
}

func (d *argoDeployer) deploy(ctx context.Context, t *testing.T, vals map[string]any) func() {
	t.Helper()
	d.syncs++
	if d.first == nil {
		app := d.exampleApplication(t, d.s.release, testbed.ChartName, env.Product.ChartVersion)
		helm := app.Object["spec"].(map[string]any)["source"].(map[string]any)["helm"].(map[string]any)
		base, _ := helm["valuesObject"].(map[string]any)
		d.first = mergeValues(normalize(t, base), normalize(t, withRegistry(vals)))
		helm["valuesObject"] = d.first
		d.create(ctx, t, app)
		return d.waiter(ctx, t, d.s.release, d.first, d.syncs)
	}
	return d.setValues(ctx, t, mergeValues(normalize(t, d.first), normalize(t, vals)))
}

// rollback goes back to the install's values, as reverting the commit
// that bumped the version would.
func (d *argoDeployer) rollback(ctx context.Context, t *testing.T) func() {
	t.Helper()
	d.syncs++
	return d.setValues(ctx, t, d.first)
}

func (d *argoDeployer) setValues(ctx context.Context, t *testing.T, vals map[string]any) func() {
	t.Helper()
	patch, err := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec/source/helm/valuesObject", "value": vals}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.apps.Patch(ctx, d.s.release, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return d.waiter(ctx, t, d.s.release, vals, d.syncs)
}

func (d *argoDeployer) deployAux(ctx context.Context, t *testing.T, c *auxChart, vals map[string]any) {
	t.Helper()
	app := d.exampleApplication(t, c.Name, c.Name, c.Version)
	app.Object["spec"].(map[string]any)["source"].(map[string]any)["helm"].(map[string]any)["valuesObject"] = normalize(t, vals)
	d.create(ctx, t, app)
	d.waiter(ctx, t, c.Name, nil, 1)()
}

// waiter waits for Argo CD's own verdict on Application name: synced to
// the chart version, Healthy (the job-mode rollout Job has completed),
// the last operation Succeeded, and the latest of syncs full syncs in
// status.history applied vals.
func (d *argoDeployer) waiter(ctx context.Context, t *testing.T, name string, vals map[string]any, syncs int) func() {
	return func() {
		t.Helper()
		want := ""
		if vals != nil {
			want = valuesVersion(vals)
		}
		if _, err := d.argo.WaitApplication(ctx, name, func(a *unstructured.Unstructured) (bool, error) {
			return argoSettled(a, want, syncs)
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// argoSettled: Synced, Healthy, the last operation Succeeded, status.history
// holding exactly syncs entries, the last one with driver version want
// (when set).
func argoSettled(a *unstructured.Unstructured, want string, syncs int) (bool, error) {
	s := func(f ...string) string { v, _, _ := unstructured.NestedString(a.Object, f...); return v }
	if s("status", "sync", "status") != "Synced" || s("status", "health", "status") != "Healthy" || s("status", "operationState", "phase") != "Succeeded" {
		return false, nil
	}
	hist, _, _ := unstructured.NestedSlice(a.Object, "status", "history")
	if len(hist) < syncs {
		return false, nil
	}
	if len(hist) > syncs {
		return false, fmt.Errorf("%d full syncs in status.history, want %d (a sync nobody asked for)", len(hist), syncs)
	}
	if want == "" {
		return true, nil
	}
	last, _ := hist[len(hist)-1].(map[string]any)
	vals, _, _ := unstructured.NestedMap(last, "source", "helm", "valuesObject")
	if got := valuesVersion(vals); got != want {
		return false, fmt.Errorf("the last sync applied driver.version %q, want %q", got, want)
	}
	return true, nil
}

// verify asks Argo CD for a fresh comparison (a refresh) and reads its
// verdict: Synced (no drift), Healthy, no extra sync, with self-heal on.
func (d *argoDeployer) verify(ctx context.Context, t *testing.T, step int) {
	t.Helper()
	before, err := d.apps.Get(ctx, d.s.release, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reconciledAt, _, _ := unstructured.NestedString(before.Object, "status", "reconciledAt")
	patch := `{"metadata":{"annotations":{"argocd.argoproj.io/refresh":"normal"}}}`
	if _, err := d.apps.Patch(ctx, d.s.release, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	a, err := d.argo.WaitApplication(ctx, d.s.release, func(a *unstructured.Unstructured) (bool, error) {
		if _, pending := a.GetAnnotations()["argocd.argoproj.io/refresh"]; pending {
			return false, fmt.Errorf("refresh not handled yet")
		}
		if at, _, _ := unstructured.NestedString(a.Object, "status", "reconciledAt"); at == reconciledAt {
			return false, fmt.Errorf("not compared again since %s", reconciledAt)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := argoSettled(a, "", d.syncs); !ok {
		t.Errorf("after step %d Argo CD reports %s (%v); want Synced, Healthy, %d syncs", step, testbed.ApplicationState(a), err, d.syncs)
	}
	if selfHeal, _, _ := unstructured.NestedBool(a.Object, "spec", "syncPolicy", "automated", "selfHeal"); !selfHeal {
		t.Error("the story must run with self-heal on")
	}
}

// valuesVersion is driver.version in a values map.
func valuesVersion(vals map[string]any) string {
	drv, _ := vals["driver"].(map[string]any)
	switch v := drv["version"].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

// mergeValues merges over into base as Helm merges values files.
func mergeValues(base, over map[string]any) map[string]any {
	for k, v := range over {
		if bm, ok := base[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				base[k] = mergeValues(bm, om)
				continue
			}
		}
		base[k] = v
	}
	return base
}
