package e2e_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// fluxNS is where Flux and the example's objects live.
const fluxNS = "flux-system"

// TestDefaultNamespaceStories runs the two examples that install release
// npu-stack in the fixed namespace npu-operator, one after the other, in
// parallel with the stories that have a namespace of their own: Flux's
// first, which must find npu-operator absent (install.createNamespace
// creates it), then helmfile's.
func TestDefaultNamespaceStories(t *testing.T) {
	t.Parallel() // npu-operator is this test's alone while it runs: see main_test.go
	t.Run("Flux", fluxStory)
	t.Run("Helmfile", helmfileStory)
}

// fluxStory: Flux v2.8's source-controller v1.9 and helm-controller
// v1.6 run docs/examples/flux-helmrelease.yaml as a user runs it: `kubectl
// apply -k` of the kustomization docs/deployers.md documents, which changes
// only the chart's location (the test bed's registry, the version
// mirrored there) and the values; the OCIRepository and the HelmRelease in
// flux-system, the release in npu-operator, created by
// install.createNamespace. The bump and the rollback are edits of the
// values file, applied again: each is a Helm upgrade run by
// helm-controller, hooks and kstatus wait included; its drift detection
// must find nothing after each.
func fluxStory(t *testing.T) {
	ctx := ctxTimeout(t, 2*time.Minute)
	if _, err := env.Client.CoreV1().Namespaces().Get(ctx, "npu-operator", metav1.GetOptions{}); err == nil {
		t.Fatal("namespace npu-operator exists before the Flux story: install.createNamespace would go untested (TestInstallUpgradeRollbackWithTheSeedCommands deletes it when it ends; the Flux story must run before anything else creates it)")
	}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fluxNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	s := newStack(t, "npu-operator", "npu-stack", 2, 1)
	flux, err := env.StartFlux(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	d := &fluxDeployer{s: s, flux: flux, dyn: dyn, hrs: dyn.Resource(testbed.HelmReleaseGVR).Namespace(fluxNS), dir: t.TempDir()}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("source-controller log:\n" + testbed.Tail(readFile(flux.SourceLogPath()), 30))
			t.Log("helm-controller log:\n" + testbed.Tail(readFile(flux.LogPath()), 60))
		}
		// Uninstalled by helm-controller, so that the stories after this
		// one find npu-operator free of another release's objects.
		d.uninstall(t)
		_ = flux.Stop()
	})
	runStory(t, s, d)
	if !t.Failed() {
		runFluxFailures(ctxTimeout(t, 15*time.Minute), t, s, d)
	}
}

type fluxDeployer struct {
	s     *stack
	flux  *testbed.Flux
	dyn   dynamic.Interface
	hrs   dynamic.ResourceInterface
	dir   string         // the user's kustomization directory
	first map[string]any // the values of the install, the rollback's target
	gen   int64          // the Helm revision the story expects next
	aux   []string       // HelmReleases of other charts
}

// observeDrift is the one patch the test adds to the user's: drift
// detection in mode warn, which reports drift (Drifted=True, a
// DriftDetected event) and leaves it, where the example's mode enabled
// would also correct it, so that the drift watch can see any.
const observeDrift = `  - target: {kind: HelmRelease, name: npu-stack}
    patch: |-
      - {op: replace, path: /spec/driftDetection/mode, value: warn}
`

// fluxKustomization is docs/deployers.md's kustomization with the user's
// edits: the mirror's URL, the chart version mirrored there, and the
// insecure line uncommented (the test bed's registry has no TLS).
func fluxKustomization(t *testing.T) string {
	t.Helper()
	return docKustomization(t, "# kustomization.yaml", [][2]string{
		{`oci://registry\.example\.com/`, "oci://" + env.Registry.Host + "/"},
		{`tag: "[^"]*"`, fmt.Sprintf("tag: %q", env.Product.ChartVersion)},
		{withoutTLS("/spec/insecure"), "${1}${2}"},
	})
}

// withoutTLS matches the commented-out line of a documented
// kustomization that a user uncomments for a registry without TLS: the
// line adding path, and the comment above it.
func withoutTLS(path string) string {
	return `(?m)^(\s*)# a registry without TLS only:\n\s*# (- \{op: add, path: ` + regexp.QuoteMeta(path) + `, [^}]*\})`
}

// docKustomization is the ```yaml block of docs/deployers.md whose first
// line is title, with each edit (a regexp the block must match, and its
// replacement) made as a user makes it.
func docKustomization(t *testing.T, title string, edits [][2]string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "deployers.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n(" + regexp.QuoteMeta(title) + "\n.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/deployers.md has no ```yaml block starting with %q", title)
	}
	k := string(m[1])
	for _, edit := range edits {
		re := regexp.MustCompile(edit[0])
		if !re.MatchString(k) {
			t.Fatalf("docs/deployers.md's %q block has no %s to edit:\n%s", title, edit[0], k)
		}
		k = re.ReplaceAllString(k, edit[1])
	}
	return k
}

// writeKustomization lays out the user's directory: the example verbatim,
// the documented kustomization, and the fleet's values as the values
// patch (merged over the example's); observe adds the test's own patch,
// observeDrift.
func (d *fluxDeployer) writeKustomization(t *testing.T, vals map[string]any, observe bool) {
	t.Helper()
	example, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", "flux-helmrelease.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	patch, err := yaml.Marshal(map[string]any{
		"apiVersion": testbed.HelmReleaseGVR.GroupVersion().String(), "kind": "HelmRelease",
		"metadata": map[string]any{"name": "npu-stack", "namespace": fluxNS},
		"spec":     map[string]any{"values": vals},
	})
	if err != nil {
		t.Fatal(err)
	}
	k := fluxKustomization(t)
	if observe {
		k += observeDrift
	}
	for name, data := range map[string][]byte{
		"flux-helmrelease.yaml": example,
		"kustomization.yaml":    []byte(k),
		"values-patch.yaml":     patch,
	} {
		if err := os.WriteFile(filepath.Join(d.dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (d *fluxDeployer) deploy(ctx context.Context, t *testing.T, vals map[string]any) func() {
	t.Helper()
	vals = normalize(t, withRegistry(vals))
	if d.first == nil {
		d.first = vals
		d.writeKustomization(t, vals, false)
		checkFluxEdits(ctx, t, d.dir)
	}
	d.writeKustomization(t, vals, true)
	kubectl(ctx, t, "kubectl apply -k "+d.dir)
	d.gen++
	return d.waiter(ctx, t, d.s.release, d.gen)
}

// checkFluxEdits: the kustomization's output differs from the example in
// the OCIRepository's url, ref and insecure and in the HelmRelease's
// values only, and does change the url and the values.
func checkFluxEdits(ctx context.Context, t *testing.T, dir string) {
	t.Helper()
	checkEdits(ctx, t, dir, "flux-helmrelease.yaml", map[string]*regexp.Regexp{
		"OCIRepository": regexp.MustCompile(`^\.spec\.(url|insecure|ref(\..*)?)$`),
		"HelmRelease":   regexp.MustCompile(`^\.spec\.values(\..*)?$`),
	}, "OCIRepository .spec.url", "HelmRelease .spec.values")
}

// checkEdits: `kubectl kustomize dir` renders the objects of the example
// file, each changed only at the paths allowed for its kind (a user's
// edits), and changed at least at each of must (a path or its prefix).
func checkEdits(ctx context.Context, t *testing.T, dir, file string, allowed map[string]*regexp.Regexp, must ...string) {
	t.Helper()
	out := decodeAll(t, kubectl(ctx, t, "kubectl kustomize "+dir))
	example := map[string]*unstructured.Unstructured{}
	for kind := range allowed {
		example[kind] = exampleObject(t, file, kind)
	}
	changed := map[string]bool{}
	if len(out) != len(example) {
		t.Fatalf("the kustomization of %s renders %d objects, the example has %d", file, len(out), len(example))
	}
	for _, o := range out {
		ex := example[o.GetKind()]
		if ex == nil {
			t.Fatalf("the kustomization of %s renders a %s the example does not have", file, o.GetKind())
		}
		for _, p := range diffPaths(ex.Object, o.Object, "") {
			if !allowed[o.GetKind()].MatchString(p) {
				t.Errorf("the documented kustomization of %s changes %s %s, which a user keeps as the example has it", file, o.GetKind(), p)
			}
			changed[o.GetKind()+" "+p] = true
		}
	}
	t.Logf("the user's edits of %s: %v", file, slices.Sorted(maps.Keys(changed)))
	for _, m := range must {
		found := false
		for p := range changed {
			if p == m || strings.HasPrefix(p, m+".") {
				found = true
			}
		}
		if !found {
			t.Errorf("the kustomization of %s does not change %s", file, m)
		}
	}
}

// diffPaths lists the leaf paths where a and b differ (list items as
// [i]; a list whose length changed is one path).
func diffPaths(a, b any, path string) []string {
	if al, ok := a.([]any); ok {
		if bl, ok := b.([]any); ok && len(al) == len(bl) {
			var out []string
			for i := range al {
				out = append(out, diffPaths(al[i], bl[i], fmt.Sprintf("%s[%d]", path, i))...)
			}
			return out
		}
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if !aok || !bok {
		if fmt.Sprint(a) == fmt.Sprint(b) {
			return nil
		}
		return []string{path}
	}
	var out []string
	seen := map[string]bool{}
	for k, v := range am {
		seen[k] = true
		out = append(out, diffPaths(v, bm[k], path+"."+k)...)
	}
	for k, v := range bm {
		if !seen[k] {
			out = append(out, diffPaths(nil, v, path+"."+k)...)
		}
	}
	return out
}

// rollback is Flux's way back: the previous values in the values file,
// applied again; a new Helm revision.
func (d *fluxDeployer) rollback(ctx context.Context, t *testing.T) func() {
	t.Helper()
	d.writeKustomization(t, d.first, true)
	kubectl(ctx, t, "kubectl apply -k "+d.dir)
	d.gen++
	return d.waiter(ctx, t, d.s.release, d.gen)
}

// deployAux installs another chart through the test bed's ExternalArtifact
// source, in flux-system as a user keeps a third-party chart.
func (d *fluxDeployer) deployAux(ctx context.Context, t *testing.T, c *auxChart, vals map[string]any) {
	t.Helper()
	if err := d.flux.PublishChart(ctx, fluxNS, c.Name, c.Archive, ""); err != nil {
		t.Fatal(err)
	}
	hr := exampleObject(t, "flux-helmrelease.yaml", "HelmRelease")
	hr.SetName(c.Name)
	spec := hr.Object["spec"].(map[string]any)
	spec["releaseName"], spec["targetNamespace"] = c.Name, auxNamespace
	spec["chartRef"] = map[string]any{"kind": "ExternalArtifact", "name": c.Name, "namespace": fluxNS}
	spec["values"] = normalize(t, vals)
	if _, err := d.hrs.Create(ctx, hr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.aux = append(d.aux, c.Name)
	d.waiter(ctx, t, c.Name, 1)()
}

func (d *fluxDeployer) auxNamespace() string { return auxNamespace }

// auxNamespace holds the stand-in DRA plugin under Flux: not npu-operator,
// which the story's HelmRelease must create.
const auxNamespace = "dra-system"

// waiter waits for helm-controller to report Helm revision version of
// release name deployed and the HelmRelease Ready.
func (d *fluxDeployer) waiter(ctx context.Context, t *testing.T, name string, version int64) func() {
	return func() {
		t.Helper()
		if _, err := d.flux.WaitHelmRelease(ctx, fluxNS, name, func(hr *unstructured.Unstructured) (bool, error) {
			if ok, err := testbed.HelmReleaseReady(hr); !ok {
				return false, err
			}
			h := fluxLatest(hr)
			if h["version"] != version || h["status"] != "deployed" {
				return false, fmt.Errorf("history[0] is version %v %v, want %d deployed", h["version"], h["status"], version)
			}
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// verify asks helm-controller for a reconcile and reads its verdict:
// Ready, the expected Helm revision of the mirrored chart version still
// the latest (no corrective upgrade), drift detection ran and found no
// drift, and no DriftDetected event; source-controller's OCIRepository
// Ready with that chart version.
func (d *fluxDeployer) verify(ctx context.Context, t *testing.T, step int) {
	t.Helper()
	hr := d.reconcile(ctx, t)
	// helm-controller adds the OCI digest's first 12 hex digits as build
	// metadata: <version>+<hex12>.
	h := fluxLatest(hr)
	if cv, _ := h["chartVersion"].(string); h["version"] != int64(step) || h["status"] != "deployed" || !strings.HasPrefix(cv, env.Product.ChartVersion+"+") {
		t.Errorf("after step %d helm-controller reports history[0] = %v, want version %d deployed of chart %s+<digest>", step, h, step, env.Product.ChartVersion)
	}
	drift := testbed.StatusCondition(hr, "Drifted")
	if drift == nil || drift["status"] != "False" || drift["reason"] != "NoDriftDetected" {
		t.Errorf("after step %d helm-controller's drift detection says %v, want Drifted=False NoDriftDetected", step, drift)
	}
	evs, err := env.Client.CoreV1().Events(fluxNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=HelmRelease,reason=DriftDetected"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		t.Errorf("helm-controller detected drift in %s: %s", e.InvolvedObject.Name, e.Message)
	}
	repo, err := d.dyn.Resource(testbed.OCIRepositoryGVR).Namespace(fluxNS).Get(ctx, "npu-stack", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rev, _, _ := unstructured.NestedString(repo.Object, "status", "artifact", "revision")
	if ready := testbed.StatusCondition(repo, "Ready"); ready == nil || ready["status"] != "True" || !regexp.MustCompile("^"+regexp.QuoteMeta(env.Product.ChartVersion)+"@sha256:").MatchString(rev) {
		t.Errorf("source-controller's OCIRepository: Ready %v, artifact revision %q; want Ready=True, %s@sha256:...", ready, rev, env.Product.ChartVersion)
	}
}

// reconcile asks helm-controller for a reconcile of the story's
// HelmRelease and returns it once handled and Ready.
func (d *fluxDeployer) reconcile(ctx context.Context, t *testing.T) *unstructured.Unstructured {
	t.Helper()
	token := strconv.FormatInt(time.Now().UnixNano(), 10)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":%q}}}`, token)
	if _, err := d.hrs.Patch(ctx, d.s.release, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	hr, err := d.flux.WaitHelmRelease(ctx, fluxNS, d.s.release, func(hr *unstructured.Unstructured) (bool, error) {
		if handled, _, _ := unstructured.NestedString(hr.Object, "status", "lastHandledReconcileAt"); handled != token {
			return false, fmt.Errorf("reconcile request %s not handled yet (last %q)", token, handled)
		}
		return testbed.HelmReleaseReady(hr)
	})
	if err != nil {
		t.Fatal(err)
	}
	return hr
}

// watchDrift records the HelmRelease's Drifted condition at every change
// and every Event about it; Drifted=True or a DriftDetected event is
// drift. The story runs in driftDetection mode warn (observeDrift), so a
// drift stays visible instead of being corrected.
func (d *fluxDeployer) watchDrift(ctx context.Context, t *testing.T) *driftWatch {
	t.Helper()
	w := newDriftWatch()
	watchObjects(t, d.dyn, testbed.HelmReleaseGVR, fluxNS, "metadata.name="+d.s.release, func(hr *unstructured.Unstructured) {
		if c := testbed.StatusCondition(hr, "Drifted"); c != nil {
			w.record("HelmRelease "+hr.GetName()+" Drifted", describe(c, "status", "reason", "message"), c["status"] == "True")
		}
	})
	watchObjects(t, d.dyn, eventsGVR, fluxNS, involvedSelector("HelmRelease", d.s.release), eventDrift(w))
	return w
}

// plantDrift edits a ConfigMap of the release by hand, asks for a
// reconcile and waits for the watch to see helm-controller report it;
// then restores the value and sees drift detection clear.
func (d *fluxDeployer) plantDrift(ctx context.Context, t *testing.T, w *driftWatch) {
	t.Helper()
	name, restore := plantedConfigMap(ctx, t, d.s.ns)
	d.reconcile(ctx, t)
	w.waitDrift(ctx, t, name)
	restore()
	hr := d.reconcile(ctx, t)
	if c := testbed.StatusCondition(hr, "Drifted"); c == nil || c["status"] != "False" {
		t.Errorf("after restoring %s helm-controller still says %v", name, c)
	}
}

// uninstall deletes the HelmReleases and waits for helm-controller to
// have uninstalled them (their finalizer gone).
func (d *fluxDeployer) uninstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	names := append([]string{d.s.release}, d.aux...)
	for _, name := range names {
		if err := d.hrs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete HelmRelease %s: %v", name, err)
		}
	}
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			if _, err := d.hrs.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("helm-controller did not uninstall %v: %v", names, err)
	}
}

func fluxLatest(hr *unstructured.Unstructured) map[string]any {
	hist, _, _ := unstructured.NestedSlice(hr.Object, "status", "history")
	if len(hist) == 0 {
		return nil
	}
	h, _ := hist[0].(map[string]any)
	return h
}

// withRegistry adds the test bed's registry to vals, as the helm CLIs'
// --set imageRegistry does.
func withRegistry(vals map[string]any) map[string]any {
	out := map[string]any{"imageRegistry": env.Product.Registry}
	for k, v := range vals {
		out[k] = v
	}
	return out
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
