package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
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
// values merged over the example's. The bump and the rollback are changes
// of valuesObject, as a Git commit and its revert would be; automated sync
// applies each. Two hook modes share one Argo CD, each on its own fleet:
// the example's hooks.mode job (the rollout a regular Job named by the
// driver spec's hash) and the chart's default hook mode (preflight as a
// PreSync hook, the rollout as a PostSync hook, post-rollback ignored).
func TestArgoCDStory(t *testing.T) {
	ctx := ctxTimeout(t, 3*time.Minute)
	argo, err := env.StartArgoCD(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range argo.LogPaths() {
				t.Logf("%s:\n%s", p, testbed.Tail(readFile(p), 40))
			}
		}
		_ = argo.Stop()
	})
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	apps := dyn.Resource(testbed.ApplicationGVR).Namespace(argo.Namespace())
	for _, tc := range []struct {
		name string
		mode string // hooks.mode; "" keeps the chart's default (hook)
	}{
		{"ExampleJobMode", "job"},
		{"DefaultHookMode", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, "", "", 2, 1)
			d := &argoDeployer{s: s, argo: argo, apps: apps, dyn: dyn, mode: tc.mode}
			t.Cleanup(func() {
				// The Applications go first, so that nothing syncs into
				// a namespace being torn down.
				for _, name := range d.created {
					_ = apps.Delete(context.Background(), name, metav1.DeleteOptions{})
				}
			})
			runStory(t, s, d)
		})
	}
}

type argoDeployer struct {
	s       *stack
	mode    string // hooks.mode set over the example's; "" removes it
	argo    *testbed.ArgoCD
	apps    dynamic.ResourceInterface
	dyn     dynamic.Interface
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
	// Self-heal off while the story watches Argo CD's view: a drift stays
	// OutOfSync for the watch to see instead of being synced away.
	if err := unstructured.SetNestedField(app.Object, false, "spec", "syncPolicy", "automated", "selfHeal"); err != nil {
		t.Fatal(err)
	}
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
		hooks := d.first["hooks"].(map[string]any)
		if d.mode == "" {
			delete(hooks, "mode")
		} else {
			hooks["mode"] = d.mode
		}
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
	// Named after the stack: both hook-mode stories share one Argo CD.
	app := d.exampleApplication(t, d.s.release+"-"+c.Name, c.Name, c.Version)
	app.Object["spec"].(map[string]any)["source"].(map[string]any)["helm"].(map[string]any)["valuesObject"] = normalize(t, vals)
	d.create(ctx, t, app)
	d.waiter(ctx, t, app.GetName(), nil, 1)()
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
// verdict: Synced (no drift), Healthy, no extra sync.
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
	d.checkHooks(t, a, step)
}

// checkHooks reads the last sync's hooks from Argo CD's operationState:
// the preflight Job a PreSync hook, and the rollout Job a PostSync hook in
// hook mode and no hook at all in job mode; every hook Succeeded.
func (d *argoDeployer) checkHooks(t *testing.T, a *unstructured.Unstructured, step int) {
	t.Helper()
	res, _, _ := unstructured.NestedSlice(a.Object, "status", "operationState", "syncResult", "resources")
	hooks := map[string]string{} // "<hookType> Job *-<suffix>" -> hookPhase
	for _, r := range res {
		m, _ := r.(map[string]any)
		ht, _ := m["hookType"].(string)
		name, _ := m["name"].(string)
		if ht == "" {
			continue
		}
		phase, _ := m["hookPhase"].(string)
		if phase != "Succeeded" {
			t.Errorf("step %d: Argo CD hook %s %s/%s ended %s: %v", step, ht, m["kind"], name, phase, m["message"])
		}
		if m["kind"] == "Job" {
			hooks[ht+" Job *"+name[strings.LastIndex(name, "-"):]] = phase
		}
	}
	want := map[string]string{"PreSync Job *-preflight": "Succeeded"}
	if d.mode == "" {
		want["PostSync Job *-rollout"] = "Succeeded"
	}
	if !reflect.DeepEqual(hooks, want) {
		t.Errorf("step %d (hooks.mode %q): the last sync ran the Job hooks %v, want %v", step, d.mode, hooks, want)
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

// watchDrift records, at every change of the story's Application, each
// sync operation (start, phase, the driver version it applied) and each
// managed resource's sync status. A resource OutOfSync while Argo CD is
// settled — the last operation Succeeded and the desired state it compares
// against is the one that operation synced — is drift.
func (d *argoDeployer) watchDrift(ctx context.Context, t *testing.T) *driftWatch {
	t.Helper()
	w := newDriftWatch()
	watchObjects(t, d.dyn, testbed.ApplicationGVR, d.argo.Namespace(), "metadata.name="+d.s.release, func(a *unstructured.Unstructured) {
		op, _, _ := unstructured.NestedMap(a.Object, "status", "operationState")
		phase, _ := op["phase"].(string)
		synced, _, _ := unstructured.NestedMap(a.Object, "status", "operationState", "syncResult", "source")
		if started, _ := op["startedAt"].(string); started != "" {
			vals, _, _ := unstructured.NestedMap(synced, "helm", "valuesObject")
			w.record("sync started "+started, fmt.Sprintf("%s, driver.version %s", phase, valuesVersion(vals)), false)
		}
		compared, _, _ := unstructured.NestedMap(a.Object, "status", "sync", "comparedTo", "source")
		settled := phase == "Succeeded" && reflect.DeepEqual(compared, synced)
		res, _, _ := unstructured.NestedSlice(a.Object, "status", "resources")
		for _, r := range res {
			m, _ := r.(map[string]any)
			if hook, _ := m["hook"].(bool); hook {
				continue
			}
			st, _ := m["status"].(string)
			state := st + " (changing)"
			if settled {
				state = st + " (settled)"
			}
			w.record(fmt.Sprintf("resource %v/%v", m["kind"], m["name"]), state, settled && st == "OutOfSync")
		}
	})
	return w
}

// plantDrift edits a ConfigMap of the release by hand and waits for the
// watch to see Argo CD report it OutOfSync; then restores the value and
// waits for Synced again.
func (d *argoDeployer) plantDrift(ctx context.Context, t *testing.T, w *driftWatch) {
	t.Helper()
	name, restore := plantedConfigMap(ctx, t, d.s.ns)
	w.waitDrift(ctx, t, "ConfigMap/"+name)
	restore()
	if _, err := d.argo.WaitApplication(ctx, d.s.release, func(a *unstructured.Unstructured) (bool, error) {
		return argoSettled(a, "", d.syncs)
	}); err != nil {
		t.Errorf("after restoring %s: %v", name, err)
	}
}
