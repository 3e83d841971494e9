package testbed_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/openfuyao/npu-stack/internal/chartpkg"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestFluxHelmReleaseInstallsUpgradesAndCorrectsDrift deploys the chart
// the test bed published as Flux users do: a HelmRelease whose chartRef is
// an ExternalArtifact, reconciled by Flux's own helm-controller (Helm,
// hooks, kstatus wait, drift correction are all its code). The hook Jobs
// run for real on a CPU process node; no node matches npuNodeSelector, so
// the node agents' DaemonSets are complete with nothing to schedule. Every
// assertion reads what only helm-controller writes: the HelmRelease
// status and its history, and the labels its post-renderer stamps.
func TestFluxHelmReleaseInstallsUpgradesAndCorrectsDrift(t *testing.T) {
	ctx := ctxTimeout(t, 15*time.Minute)
	flux, err := env.StartFlux(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := flux.Stop(); err != nil {
			t.Errorf("stop helm-controller: %v", err)
		}
	})
	ns := namespace(t)
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(flux.LogPath())
			t.Logf("helm-controller log (%s):\n%s", flux.LogPath(), testbed.Tail(string(log), 150))
			t.Log(env.PodLogs(context.Background(), ns, 25))
		}
	})
	// The hook Jobs run on this node only (hooks.nodeSelector): left to
	// their preference for non-NPU nodes they may land on another test's
	// KWOK node, which runs nothing and marks a Job's pod complete.
	hooksLabel := map[string]string{"test.npu-stack.openfuyao.com/hooks": ns}
	hooksSelector := map[string]any{"test.npu-stack.openfuyao.com/hooks": ns} // values as Helm reads them
	if _, err := env.AddProcessNodes(ctx, 1, testbed.NodeSpec{Prefix: "flux-hooks", CPU: true, Labels: hooksLabel}); err != nil {
		t.Fatal(err)
	}
	const fleetLabel = "test.npu-stack.openfuyao.com/fleet"
	npu, err := env.AddProcessNodes(ctx, 1, testbed.NodeSpec{Prefix: "flux-npu", Driver: "25.5.0", Labels: map[string]string{fleetLabel: ns}})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}

	const name = "npu-stack"
	v := env.Product.Version
	vals := map[string]any{
		"namespace":       ns,
		"imageRegistry":   env.Product.Registry,
		"npuNodeSelector": map[string]any{contract.LabelNPUPresent: "true", fleetLabel: ns},
		"driver":          map[string]any{"version": "25.5.0"},
		"rebooter":        map[string]any{"uptimeGuardMinutes": 0, "metricsPort": 0},
		"healthWatch":     map[string]any{"probeIntervalSeconds": 5, "probeTimeoutSeconds": 2, "metricsPort": 0},
		// One fixed port on this machine for every release: off, as the
		// test bed's helm installs have it (testbed Helm values).
		"fleetExporter": map[string]any{"enabled": false},
		// Pinned: the second chart package below has another appVersion,
		// which the image tags default to, and no images of that tag.
		"images": map[string]any{"hooks": map[string]any{"tag": v}, "rebooter": map[string]any{"tag": v}, "healthwatch": map[string]any{"tag": v}},
		"hooks":  map[string]any{"resume": map[string]any{"enabled": false}, "activeDeadlineSeconds": 600, "nodeSelector": hooksSelector},
	}
	if err := env.Helm(ns).MirrorDriverImages(ctx, vals); err != nil {
		t.Fatal(err)
	}

	// Install.
	digest1 := fluxPublish(ctx, t, flux, ns, name, env.Product.ChartArchive)
	hr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": testbed.HelmReleaseGVR.GroupVersion().String(),
		"kind":       "HelmRelease",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": fluxJSON(t, map[string]any{
			"interval":       "10m",
			"releaseName":    name,
			"chartRef":       map[string]any{"kind": "ExternalArtifact", "name": name, "namespace": ns},
			"timeout":        "5m",
			"install":        map[string]any{"remediation": map[string]any{"retries": 0}},
			"upgrade":        map[string]any{"remediation": map[string]any{"retries": 0}},
			"driftDetection": map[string]any{"mode": "enabled"},
			"values":         vals,
		}),
	}}
	hrs := dyn.Resource(testbed.HelmReleaseGVR).Namespace(ns)
	if _, err := hrs.Create(ctx, hr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cur := fluxWaitRelease(ctx, t, flux, ns, name, 1, env.Product.ChartVersion, digest1)
	fluxAssertRendered(ctx, t, ns, name, cur)
	// Ready means helm-controller's kstatus wait saw every DaemonSet
	// rolled out: here, one Ready pod each on the NPU node.
	dss, err := env.Client.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name})
	if err != nil {
		t.Fatal(err)
	}
	if len(dss.Items) == 0 {
		t.Fatal("the release has no DaemonSets")
	}
	for _, ds := range dss.Items {
		if st := ds.Status; st.DesiredNumberScheduled != 1 || st.NumberReady != 1 {
			t.Errorf("DaemonSet %s: %d desired, %d ready when Flux said Ready; want 1 on %s", ds.Name, st.DesiredNumberScheduled, st.NumberReady, npu[0].Name())
		}
	}
	preflight, err := env.Client.BatchV1().Jobs(ns).Get(ctx, name+"-preflight", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the pre-install hook Job: %v", err)
	}
	if testbed.JobFinished(preflight) != batchv1.JobComplete {
		t.Fatalf("preflight hook Job %s did not complete: %+v", preflight.Name, preflight.Status.Conditions)
	}

	// Upgrade: a new chart version published as a new artifact revision;
	// helm-controller notices the ExternalArtifact change by itself.
	chartDir, err := testbed.ChartPath()
	if err != nil {
		t.Fatal(err)
	}
	v2 := v + "-flux2"
	archive2, err := chartpkg.Package(chartDir, v2, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	digest2 := fluxPublish(ctx, t, flux, ns, name, archive2)
	cur = fluxWaitRelease(ctx, t, flux, ns, name, 2, chartpkg.ChartVersion(v2), digest2)
	fluxAssertRendered(ctx, t, ns, name, cur)
	if prev := fluxHistory(t, cur, 1); prev["status"] != "superseded" || prev["chartVersion"] != fluxChartVersion(env.Product.ChartVersion, digest1) {
		t.Errorf("history[1] = %v, want the first release superseded", prev)
	}

	// Upgrade by values: a new generation of the HelmRelease.
	const mark = "test.npu-stack.openfuyao.com/flux-values"
	values := fmt.Sprintf(`{"spec":{"values":{"commonLabels":{%q:"3"}}}}`, mark)
	if _, err := hrs.Patch(ctx, name, types.MergePatchType, []byte(values), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	cur = fluxWaitRelease(ctx, t, flux, ns, name, 3, chartpkg.ChartVersion(v2), digest2)
	ds := fluxAssertRendered(ctx, t, ns, name, cur)
	if got := ds.Labels[mark]; got != "3" {
		t.Fatalf("rebooter DaemonSet label %s = %q after the values upgrade, want 3", mark, got)
	}

	// Drift: someone edits an object of the release; the next reconcile
	// puts it back without a new Helm revision.
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"drifted"}}}`, mark)
	if _, err := env.Client.AppsV1().DaemonSets(ns).Patch(ctx, ds.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "someone"}); err != nil {
		t.Fatal(err)
	}
	token := strconv.FormatInt(time.Now().UnixNano(), 10)
	reconcile := fmt.Sprintf(`{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":%q}}}`, token)
	if _, err := hrs.Patch(ctx, name, types.MergePatchType, []byte(reconcile), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	cur, err = flux.WaitHelmRelease(ctx, ns, name, func(hr *unstructured.Unstructured) (bool, error) {
		if handled, _, _ := unstructured.NestedString(hr.Object, "status", "lastHandledReconcileAt"); handled != token {
			return false, fmt.Errorf("reconcile request %s not handled yet (last %q)", token, handled)
		}
		return testbed.HelmReleaseReady(hr)
	})
	if err != nil {
		t.Fatal(err)
	}
	if h := fluxHistory(t, cur, 0); h["version"] != int64(3) {
		t.Errorf("drift correction made a new Helm revision: history[0] = %v", h)
	}
	ds, err = env.Client.AppsV1().DaemonSets(ns).Get(ctx, ds.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ds.Labels[mark]; got != "3" {
		t.Errorf("after the reconcile the drifted label is %q; helm-controller's drift correction should have restored 3", got)
	}
}

// fluxPublish serves archive as ExternalArtifact namespace/name and returns
// its digest.
func fluxPublish(ctx context.Context, t *testing.T, flux *testbed.Flux, namespace, name, archive string) string {
	t.Helper()
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if err := flux.PublishChart(ctx, namespace, name, archive, ""); err != nil {
		t.Fatal(err)
	}
	return "sha256:" + hex.EncodeToString(sum[:])
}

// fluxChartVersion is the chart version helm-controller installs from an
// artifact whose revision is a digest: the digest's first 12 hex digits
// as build metadata, so that a changed artifact is a new chart version.
func fluxChartVersion(chartVersion, digest string) string {
	return chartVersion + "+" + strings.TrimPrefix(digest, "sha256:")[:12]
}

// fluxWaitRelease waits until helm-controller reports Helm revision version
// deployed from the chart of chartVersion in the artifact of digest, and
// Ready for the current generation.
func fluxWaitRelease(ctx context.Context, t *testing.T, flux *testbed.Flux, ns, name string, version int64, chartVersion, digest string) *unstructured.Unstructured {
	t.Helper()
	want := fluxChartVersion(chartVersion, digest)
	hr, err := flux.WaitHelmRelease(ctx, ns, name, func(hr *unstructured.Unstructured) (bool, error) {
		if ok, err := testbed.HelmReleaseReady(hr); !ok {
			return false, err
		}
		hist, _, _ := unstructured.NestedSlice(hr.Object, "status", "history")
		if len(hist) == 0 {
			return false, errors.New("ready, but no history")
		}
		h, _ := hist[0].(map[string]any)
		if h["version"] != version || h["status"] != "deployed" || h["chartVersion"] != want || h["ociDigest"] != digest {
			return false, fmt.Errorf("history[0] = version %v %v chart %v digest %v; want version %d deployed chart %s digest %s",
				h["version"], h["status"], h["chartVersion"], h["ociDigest"], version, want, digest)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hr
}

func fluxHistory(t *testing.T, hr *unstructured.Unstructured, i int) map[string]any {
	t.Helper()
	hist, _, _ := unstructured.NestedSlice(hr.Object, "status", "history")
	if len(hist) <= i {
		t.Fatalf("status.history has %d entries, want more than %d", len(hist), i)
	}
	h, _ := hist[i].(map[string]any)
	return h
}

// fluxAssertRendered checks that the live rebooter DaemonSet comes from the
// release hr reports: rendered from the chart version helm-controller
// loaded and stamped by helm-controller's origin-label post-renderer.
func fluxAssertRendered(ctx context.Context, t *testing.T, ns, name string, hr *unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	ds, err := env.Client.AppsV1().DaemonSets(ns).Get(ctx, name+"-rebooter", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the release's rebooter DaemonSet: %v", err)
	}
	chartVersion, _ := fluxHistory(t, hr, 0)["chartVersion"].(string)
	want := map[string]string{
		"helm.sh/chart":                    "npu-stack-" + strings.ReplaceAll(chartVersion, "+", "_"),
		"helm.toolkit.fluxcd.io/name":      name,
		"helm.toolkit.fluxcd.io/namespace": ns,
		"app.kubernetes.io/managed-by":     "Helm",
		"app.kubernetes.io/instance":       name,
		"app.kubernetes.io/part-of":        "npu-stack",
		"app.kubernetes.io/version":        fluxHistory(t, hr, 0)["appVersion"].(string),
	}
	for k, v := range want {
		if got := ds.Labels[k]; got != v {
			t.Errorf("rebooter DaemonSet label %s = %q, want %q", k, got, v)
		}
	}
	return ds
}

// fluxJSON converts v to the plain JSON types unstructured objects hold.
func fluxJSON(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
