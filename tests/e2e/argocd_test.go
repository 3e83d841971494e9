package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestArgoCDStory: Argo CD v3.6 (application controller, repo server
// rendering with helm v4, redis) syncs the chart from the test bed's
// registry with automated sync, two Applications on one Argo CD, each on
// its own fleet:
//   - DefaultHookMode: docs/examples/argocd-application.yaml applied as
//     a user does, with docs/deployers.md's Argo CD kustomization
//     (argokustomize_test.go): the fleet's values merged over the
//     example's, hooks.mode set to the chart's default, hook (preflight a
//     PreSync hook, the rollout a PostSync hook, post-rollback ignored);
//     the bump and the rollback are the values patch changed and applied
//     again;
//   - ValuesFromGit: docs/examples/argocd-application-git-values.yaml,
//     the multi-source Application taking its values file from a Git
//     repository served by git http-backend (the example's valuesObject
//     and the fleet's in it, hooks.mode job); the bump is a commit, the
//     rollback `git revert`.
func TestArgoCDStory(t *testing.T) {
	t.Parallel() // its own namespace, release and nodes: see main_test.go
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
		git  bool   // the values from Git: the multi-source example
	}{
		{"DefaultHookMode", "", false},
		{"ValuesFromGit", "job", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, "", "", 2, 1)
			d := &argoDeployer{s: s, argo: argo, apps: apps, dyn: dyn, mode: tc.mode, kustomize: !tc.git}
			if tc.git {
				gs, err := testbed.StartGitServer(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = gs.Stop() })
				if d.git, err = gs.NewRepo("fleet"); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() {
				// The Applications go first, so that nothing syncs into
				// a namespace being torn down.
				for _, name := range d.created {
					_ = apps.Delete(context.Background(), name, metav1.DeleteOptions{})
				}
			})
			runStory(t, s, d)
			if !tc.git && !t.Failed() {
				runArgoFailures(ctxTimeout(t, 15*time.Minute), t, s, d)
			}
		})
	}
}

type argoDeployer struct {
	s       *stack
	mode    string           // hooks.mode set over the example's; "" removes it
	git     *testbed.GitRepo // the values' repository (multi-source)
	argo    *testbed.ArgoCD
	apps    dynamic.ResourceInterface
	dyn     dynamic.Interface
	first   map[string]any // the install's values: the rollback's target
	syncs   int            // full syncs the story expects in status.history
	created []string
	// kustomize: the Application is the example applied with the
	// documented kustomization (kubectl apply -k) from kdir.
	kustomize bool
	kdir      string
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
	if d.first == nil && d.kustomize {
		vals = normalize(t, withRegistry(vals))
		hooks, _ := vals["hooks"].(map[string]any)
		if hooks == nil {
			hooks = map[string]any{}
			vals["hooks"] = hooks
		}
		hooks["mode"] = "hook" // the chart's default, over the example's job
		d.first = d.applyKustomization(ctx, t, vals)
		return d.waiter(ctx, t, d.s.release, valuesVersion(d.first), d.syncs)
	}
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
		if d.git != nil {
			want := d.commit(t, d.first, "npu-stack: install driver "+valuesVersion(d.first))
			d.create(ctx, t, d.gitApplication(t))
			return d.waiter(ctx, t, d.s.release, want, d.syncs)
		}
		helm["valuesObject"] = d.first
		d.create(ctx, t, app)
		return d.waiter(ctx, t, d.s.release, valuesVersion(d.first), d.syncs)
	}
	next := mergeValues(normalize(t, d.first), normalize(t, vals))
	if d.git != nil {
		want := d.commit(t, next, "npu-stack: driver "+valuesVersion(next))
		d.refresh(ctx, t)
		return d.waiter(ctx, t, d.s.release, want, d.syncs)
	}
	return d.setValues(ctx, t, next)
}

// gitApplication is the multi-source example's Application: the chart
// from the test bed's registry, the values from d.git, into the stack's
// namespace.
func (d *argoDeployer) gitApplication(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	app := exampleObject(t, "argocd-application-git-values.yaml", "Application")
	app.SetName(d.s.release)
	app.SetNamespace(d.argo.Namespace())
	spec := app.Object["spec"].(map[string]any)
	srcs := spec["sources"].([]any)
	chart, values := srcs[0].(map[string]any), srcs[1].(map[string]any)
	chart["repoURL"], chart["targetRevision"] = d.argo.ChartRepoURL(), env.Product.ChartVersion
	chart["helm"].(map[string]any)["releaseName"] = d.s.release
	values["repoURL"] = d.git.URL
	spec["destination"].(map[string]any)["namespace"] = d.s.ns
	if err := unstructured.SetNestedField(app.Object, false, "spec", "syncPolicy", "automated", "selfHeal"); err != nil {
		t.Fatal(err)
	}
	// Only what docs/deployers.md tells a user to set (the chart mirror's
	// URL and version, the fleet repository's URL) and the test's naming
	// and self-heal differ from the example.
	allowed := regexp.MustCompile(`^\.spec\.sources\[0\]\.(repoURL|targetRevision)$|^\.spec\.sources\[1\]\.repoURL$` +
		`|^\.metadata\.name$|^\.spec\.sources\[0\]\.helm\.releaseName$|^\.spec\.destination\.namespace$|^\.spec\.syncPolicy\.automated\.selfHeal$`)
	for _, p := range diffPaths(exampleObject(t, "argocd-application-git-values.yaml", "Application").Object, app.Object, "") {
		if !allowed.MatchString(p) {
			t.Errorf("the values-from-Git Application changes %s of the example, which a user keeps", p)
		}
	}
	return app
}

// commit writes vals as the fleet repository's npu-stack/values.yaml and
// returns the commit's hash.
func (d *argoDeployer) commit(t *testing.T, vals map[string]any, msg string) string {
	t.Helper()
	b, err := yaml.Marshal(vals)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := d.git.Commit(map[string][]byte{"npu-stack/values.yaml": b}, msg)
	if err != nil {
		t.Fatal(err)
	}
	return hash
}

// refresh asks Argo CD to look at the sources again, as a Git forge's
// webhook does on a push.
func (d *argoDeployer) refresh(ctx context.Context, t *testing.T) {
	t.Helper()
	patch := `{"metadata":{"annotations":{"argocd.argoproj.io/refresh":"hard"}}}`
	if _, err := d.apps.Patch(ctx, d.s.release, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rollback goes back to the install's values, as reverting the commit
// that bumped the version would.
func (d *argoDeployer) rollback(ctx context.Context, t *testing.T) func() {
	t.Helper()
	d.syncs++
	if d.git != nil {
		want, err := d.git.Revert()
		if err != nil {
			t.Fatal(err)
		}
		d.refresh(ctx, t)
		return d.waiter(ctx, t, d.s.release, want, d.syncs)
	}
	return d.setValues(ctx, t, d.first)
}

func (d *argoDeployer) setValues(ctx context.Context, t *testing.T, vals map[string]any) func() {
	t.Helper()
	if d.kustomize {
		// The user's values patch changed and applied again.
		d.applyKustomization(ctx, t, vals)
		return d.waiter(ctx, t, d.s.release, valuesVersion(vals), d.syncs)
	}
	patch, err := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec/source/helm/valuesObject", "value": vals}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.apps.Patch(ctx, d.s.release, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return d.waiter(ctx, t, d.s.release, valuesVersion(vals), d.syncs)
}

func (d *argoDeployer) deployAux(ctx context.Context, t *testing.T, c *auxChart, vals map[string]any) {
	t.Helper()
	// Named after the stack: both hook-mode stories share one Argo CD.
	app := d.exampleApplication(t, d.s.release+"-"+c.Name, c.Name, c.Version)
	app.Object["spec"].(map[string]any)["source"].(map[string]any)["helm"].(map[string]any)["valuesObject"] = normalize(t, vals)
	d.create(ctx, t, app)
	d.waiter(ctx, t, app.GetName(), "", 1)()
}

// waiter waits for Argo CD's own verdict on Application name: synced,
// Healthy (the rollout has completed), the last operation Succeeded, and
// the latest of syncs full syncs in status.history applied want (see
// argoSettled).
func (d *argoDeployer) waiter(ctx context.Context, t *testing.T, name, want string, syncs int) func() {
	return func() {
		t.Helper()
		if _, err := d.argo.WaitApplication(ctx, name, func(a *unstructured.Unstructured) (bool, error) {
			return argoSettled(a, want, syncs)
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// argoSettled: Synced, Healthy, the last operation Succeeded, status.history
// holding exactly syncs entries, the last one applying want (when set):
// the driver version of a single source's valuesObject, or one of a
// multi-source sync's revisions (the values' commit).
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
	if revs, ok := last["revisions"].([]any); ok {
		if slices.Contains(revs, any(want)) {
			return true, nil
		}
		return false, fmt.Errorf("the last sync applied revisions %v, want %s among them", revs, want)
	}
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
// settled — the last operation Succeeded, compared again since, and the
// desired state it compares against is the one that operation synced — is
// drift.
func (d *argoDeployer) watchDrift(ctx context.Context, t *testing.T) *driftWatch {
	t.Helper()
	w := newDriftWatch()
	watchObjects(t, d.dyn, testbed.ApplicationGVR, d.argo.Namespace(), "metadata.name="+d.s.release, func(a *unstructured.Unstructured) {
		op, _, _ := unstructured.NestedMap(a.Object, "status", "operationState")
		phase, _ := op["phase"].(string)
		synced, _, _ := unstructured.NestedMap(a.Object, "status", "operationState", "syncResult", "source")
		if started, _ := op["startedAt"].(string); started != "" {
			vals, _, _ := unstructured.NestedMap(synced, "helm", "valuesObject")
			revs, _, _ := unstructured.NestedStringSlice(a.Object, "status", "operationState", "syncResult", "revisions")
			w.record("sync started "+started, fmt.Sprintf("%s, driver.version %q, revisions %v", phase, valuesVersion(vals), revs), false)
		}
		// Settled: the desired state compared against is the one the last
		// operation synced: the source and its revision, or for a
		// multi-source Application the sources and their revisions (its
		// syncResult also carries an empty single source).
		get := func(f ...string) any { v, _, _ := unstructured.NestedFieldNoCopy(a.Object, f...); return v }
		src, rev := "source", "revision"
		if get("status", "sync", "comparedTo", "sources") != nil {
			src, rev = "sources", "revisions"
		}
		// The resources' statuses must also come from a comparison made
		// after the operation finished: the update that marks it
		// Succeeded may still carry the statuses compared before its last
		// step (a Job it created a moment ago OutOfSync).
		finished, _, _ := unstructured.NestedString(a.Object, "status", "operationState", "finishedAt")
		reconciled, _, _ := unstructured.NestedString(a.Object, "status", "reconciledAt")
		fin, errF := time.Parse(time.RFC3339, finished)
		rec, errR := time.Parse(time.RFC3339, reconciled)
		why := ""
		switch {
		case phase != "Succeeded":
			why = "operation " + phase
		case errF != nil || errR != nil || !rec.After(fin):
			why = fmt.Sprintf("compared at %s, operation finished at %s", reconciled, finished)
		case !reflect.DeepEqual(get("status", "sync", "comparedTo", src), get("status", "operationState", "syncResult", src)):
			why = "new " + src
		case !reflect.DeepEqual(get("status", "sync", rev), get("status", "operationState", "syncResult", rev)):
			why = fmt.Sprintf("%s %v, last synced %v", rev, get("status", "sync", rev), get("status", "operationState", "syncResult", rev))
		}
		settled := why == ""
		res, _, _ := unstructured.NestedSlice(a.Object, "status", "resources")
		for _, r := range res {
			m, _ := r.(map[string]any)
			if hook, _ := m["hook"].(bool); hook {
				continue
			}
			st, _ := m["status"].(string)
			key := fmt.Sprintf("resource %v/%v", m["kind"], m["name"])
			switch {
			case st == "OutOfSync" && settled:
				w.record(key, st+" (settled)", true)
			case st == "OutOfSync":
				w.record(key, st+" (desired state changing: "+why+")", false)
			case w.seenKey(key):
				w.record(key, st, false)
			}
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
