package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestFluxStory: Flux's helm-controller v1.6 applies
// docs/examples/flux-helmrelease.yaml's HelmRelease (its source an
// ExternalArtifact serving the packaged chart, its values the fleet's):
// the version bump and the rollback are changes of spec.values, so each
// is a Helm upgrade run by helm-controller, hooks and kstatus wait
// included; its drift detection must find nothing after each.
func TestFluxStory(t *testing.T) {
	s := newStack(t, "", "", 2, 1)
	ctx := ctxTimeout(t, 2*time.Minute)
	flux, err := env.StartFlux(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("helm-controller log:\n" + testbed.Tail(readFile(flux.LogPath()), 60))
		}
		_ = flux.Stop()
	})
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	runStory(t, s, &fluxDeployer{s: s, flux: flux, hrs: dyn.Resource(testbed.HelmReleaseGVR).Namespace(s.ns)})
}

type fluxDeployer struct {
	s     *stack
	flux  *testbed.Flux
	hrs   dynamic.ResourceInterface
	first map[string]any // the values of the install, the rollback's target
	gen   int64          // the Helm revision the story expects next
}

// exampleHelmRelease is the HelmRelease of the example file with its
// source and values replaced, in namespace ns.
func exampleHelmRelease(t *testing.T, name, ns string) *unstructured.Unstructured {
	t.Helper()
	hr := exampleObject(t, "flux-helmrelease.yaml", "HelmRelease")
	hr.SetName(name)
	hr.SetNamespace(ns)
	spec := hr.Object["spec"].(map[string]any)
	spec["releaseName"], spec["targetNamespace"] = name, ns
	spec["chartRef"] = map[string]any{"kind": "ExternalArtifact", "name": name, "namespace": ns}
	return hr
}

func (d *fluxDeployer) apply(ctx context.Context, t *testing.T, name, archive string, vals map[string]any) {
	t.Helper()
	if d.gen == 0 || name != d.s.release {
		if err := d.flux.PublishChart(ctx, d.s.ns, name, archive, ""); err != nil {
			t.Fatal(err)
		}
		hr := exampleHelmRelease(t, name, d.s.ns)
		hr.Object["spec"].(map[string]any)["values"] = normalize(t, vals)
		if _, err := d.hrs.Create(ctx, hr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	// One JSON patch replacing the whole set: one new generation, one
	// Helm upgrade (a merge patch would merge into the old values, and
	// clearing them first would be a second upgrade).
	patch, err := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec/values", "value": normalize(t, vals)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.hrs.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (d *fluxDeployer) deploy(ctx context.Context, t *testing.T, vals map[string]any) func() {
	t.Helper()
	vals = normalize(t, withRegistry(vals))
	if d.first == nil {
		d.first = vals
	}
	d.apply(ctx, t, d.s.release, env.Product.ChartArchive, vals)
	d.gen++
	return d.waiter(ctx, t, d.s.release, d.gen)
}

// rollback is Flux's way back: the previous values, a new Helm revision.
func (d *fluxDeployer) rollback(ctx context.Context, t *testing.T) func() {
	t.Helper()
	d.apply(ctx, t, d.s.release, "", d.first)
	d.gen++
	return d.waiter(ctx, t, d.s.release, d.gen)
}

func (d *fluxDeployer) deployAux(ctx context.Context, t *testing.T, c *auxChart, vals map[string]any) {
	t.Helper()
	d.apply(ctx, t, c.Name, c.Archive, vals)
	d.waiter(ctx, t, c.Name, 1)()
}

// waiter waits for helm-controller to report Helm revision version of
// release name deployed and the HelmRelease Ready.
func (d *fluxDeployer) waiter(ctx context.Context, t *testing.T, name string, version int64) func() {
	return func() {
		t.Helper()
		if _, err := d.flux.WaitHelmRelease(ctx, d.s.ns, name, func(hr *unstructured.Unstructured) (bool, error) {
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
// Ready, the expected Helm revision still the latest (no corrective
// upgrade), drift detection ran and found no drift, and no DriftDetected
// event for the release.
func (d *fluxDeployer) verify(ctx context.Context, t *testing.T, step int) {
	t.Helper()
	token := strconv.FormatInt(time.Now().UnixNano(), 10)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":%q}}}`, token)
	if _, err := d.hrs.Patch(ctx, d.s.release, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	hr, err := d.flux.WaitHelmRelease(ctx, d.s.ns, d.s.release, func(hr *unstructured.Unstructured) (bool, error) {
		if handled, _, _ := unstructured.NestedString(hr.Object, "status", "lastHandledReconcileAt"); handled != token {
			return false, fmt.Errorf("reconcile request %s not handled yet (last %q)", token, handled)
		}
		return testbed.HelmReleaseReady(hr)
	})
	if err != nil {
		t.Fatal(err)
	}
	if h := fluxLatest(hr); h["version"] != int64(step) || h["status"] != "deployed" {
		t.Errorf("after step %d helm-controller reports history[0] = %v, want version %d deployed", step, h, step)
	}
	drift := testbed.StatusCondition(hr, "Drifted")
	if drift == nil || drift["status"] != "False" || drift["reason"] != "NoDriftDetected" {
		t.Errorf("after step %d helm-controller's drift detection says %v, want Drifted=False NoDriftDetected", step, drift)
	}
	evs, err := env.Client.CoreV1().Events(d.s.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=HelmRelease,reason=DriftDetected"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		t.Errorf("helm-controller detected drift in %s: %s", e.InvolvedObject.Name, e.Message)
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
