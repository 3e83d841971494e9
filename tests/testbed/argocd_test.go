package testbed_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

const argoFleetLabel = "test.npu-stack.openfuyao.com/argocd-fleet"

// TestArgoCDSyncsTheChartFromTheRegistry deploys npu-stack with the real
// Argo CD (application controller + repo server + redis): an Application
// whose source is the chart in the test bed's OCI registry, automated
// sync with self-heal, hooks.mode=job as docs/deployers.md tells Argo CD
// users. Everything asserted is what Argo CD itself reports (sync, health,
// operation, history, hook results) plus the objects it applied.
func TestArgoCDSyncsTheChartFromTheRegistry(t *testing.T) {
	ctx := ctxTimeout(t, 25*time.Minute)
	argo, err := env.StartArgoCD(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%05d", rand.IntN(100000))
	ns, appName := "argocd-npu-"+suffix, "npu-stack-"+suffix
	apps := dyn.Resource(testbed.ApplicationGVR).Namespace(argo.Namespace())
	t.Cleanup(func() {
		if t.Failed() {
			if app, err := apps.Get(context.Background(), appName, metav1.GetOptions{}); err == nil {
				st, _, _ := unstructured.NestedMap(app.Object, "status")
				t.Logf("Application status: %v", st)
			}
			for _, p := range argo.LogPaths() {
				b, _ := os.ReadFile(p)
				t.Logf("--- %s:\n%s", p, testbed.Tail(string(b), 60))
			}
			t.Logf("pods of %s:\n%s", ns, env.PodLogs(context.Background(), ns, 30))
		}
		// No resources finalizer on the Application: deleting it leaves
		// the stack; only Argo CD goes.
		_ = apps.Delete(context.Background(), appName, metav1.DeleteOptions{})
		if err := argo.Stop(); err != nil {
			t.Errorf("stop Argo CD: %v", err)
		}
	})

	// A non-NPU process node runs the hook Jobs for real (the chart prefers
	// non-NPU nodes for them); one NPU process node, in a fleet of its own,
	// runs the driver pod, rebooter, device plugin and exporter.
	fleet := "argocd-" + suffix
	// hooks.nodeSelector keeps the hook Jobs on it: another test's KWOK
	// node would take a Job's pod, run nothing and mark it complete.
	hooksLabel := map[string]string{"test.npu-stack.openfuyao.com/hooks": fleet}
	hooksSelector := map[string]any{"test.npu-stack.openfuyao.com/hooks": fleet} // values as Helm reads them
	if _, err := env.AddProcessNodes(ctx, 1, testbed.NodeSpec{Prefix: "argo-cpu", CPU: true, Labels: hooksLabel}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.AddProcessNodes(ctx, 1, testbed.NodeSpec{Prefix: "argo-npu", Labels: map[string]string{argoFleetLabel: fleet}}); err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{
		"imageRegistry":   env.Product.Registry,
		"namespace":       ns,
		"npuNodeSelector": map[string]any{contract.LabelNPUPresent: "true", argoFleetLabel: fleet},
		"driver": map[string]any{
			"version":       "25.5.0",
			"upgradePolicy": map[string]any{"autoUpgrade": true, "rebootTimeoutSeconds": 120},
		},
		"rebooter":    map[string]any{"uptimeGuardMinutes": 0, "metricsPort": 0},
		"healthWatch": map[string]any{"metricsPort": 0},
		// One fixed port on this machine for every release: off, as the
		// test bed's helm installs have it (testbed Helm values).
		"fleetExporter": map[string]any{"enabled": false},
		"hooks": map[string]any{"mode": "job", "activeDeadlineSeconds": 600,
			"resume": map[string]any{"enabled": false}, "nodeSelector": hooksSelector},
	}
	// Seed Step 1.1: the driver images are in the registry before a sync.
	if err := env.Helm(ns).MirrorDriverImages(ctx, vals); err != nil {
		t.Fatal(err)
	}
	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1",
		"kind":       "Application",
		"metadata":   map[string]any{"name": appName, "namespace": argo.Namespace()},
		"spec": map[string]any{
			"project": "default",
			"source": map[string]any{
				"repoURL":        argo.ChartRepoURL(),
				"chart":          testbed.ChartName,
				"targetRevision": env.Product.ChartVersion,
				"helm": map[string]any{
					"releaseName":  "npu-stack",
					"valuesObject": vals,
					"parameters":   []any{map[string]any{"name": "healthWatch.probeIntervalSeconds", "value": "5"}},
				},
			},
			"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": ns},
			"syncPolicy": map[string]any{
				"automated":   map[string]any{"prune": true, "selfHeal": true},
				"syncOptions": []any{"CreateNamespace=true"},
			},
		},
	}}
	if _, err := apps.Create(ctx, app, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Application: %v", err)
	}

	first := argoWaitApp(ctx, t, argo, appName, "the first sync", func(a *unstructured.Unstructured) bool {
		return argoSynced(a, env.Product.ChartVersion) && len(argoHistory(a)) >= 1
	})
	argoCheckHooks(t, first, "first sync")
	argoCheckApplied(ctx, t, dyn, first)
	if got := argoProbeInterval(ctx, t, dyn, first); got != "5s" {
		t.Errorf("driver DaemonSet --probe-interval=%s, want 5s", got)
	}

	// A changed parameter: automated sync applies it as a second
	// operation, recorded in status.history.
	patch := `{"spec":{"source":{"helm":{"parameters":[{"name":"healthWatch.probeIntervalSeconds","value":"7"}]}}}}`
	if _, err := apps.Patch(ctx, appName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch Application: %v", err)
	}
	second := argoWaitApp(ctx, t, argo, appName, "the second sync", func(a *unstructured.Unstructured) bool {
		h := argoHistory(a)
		if !argoSynced(a, env.Product.ChartVersion) || len(h) < 2 {
			return false
		}
		params, _, _ := unstructured.NestedSlice(h[len(h)-1].(map[string]any), "source", "helm", "parameters")
		return len(params) == 1 && params[0].(map[string]any)["value"] == "7"
	})
	argoCheckHooks(t, second, "second sync")
	argoCheckApplied(ctx, t, dyn, second)
	if got := argoProbeInterval(ctx, t, dyn, second); got != "7s" {
		t.Errorf("after the second sync the driver DaemonSet has --probe-interval=%s, want 7s", got)
	}

	// Self-heal: a rendered object deleted behind Argo CD's back comes
	// back by an automated partial sync of just the out-of-sync objects
	// (partial syncs add no history entry).
	svcs := env.Client.CoreV1().Services(ns)
	svcList, err := svcs.List(ctx, metav1.ListOptions{})
	if err != nil || len(svcList.Items) != 1 {
		t.Fatalf("want the exporter Service alone in %s: %v %v", ns, svcList, err)
	}
	svc := svcList.Items[0]
	if err := svcs.Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	third := argoWaitApp(ctx, t, argo, appName, "the self-heal sync", func(a *unstructured.Unstructured) bool {
		if !argoSynced(a, env.Product.ChartVersion) {
			return false
		}
		res, _, _ := unstructured.NestedSlice(a.Object, "status", "operationState", "syncResult", "resources")
		return slices.ContainsFunc(res, func(r any) bool {
			m := r.(map[string]any)
			return m["kind"] == "Service" && m["name"] == svc.Name && strings.HasSuffix(fmt.Sprint(m["message"]), "created")
		})
	})
	if auto, _, _ := unstructured.NestedBool(third.Object, "status", "operationState", "operation", "initiatedBy", "automated"); !auto {
		t.Errorf("the sync that recreated Service %s was not automated", svc.Name)
	}
	if back, err := svcs.Get(ctx, svc.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("Service %s after self-heal: %v", svc.Name, err)
	} else if back.UID == svc.UID {
		t.Errorf("Service %s was never deleted (uid %s)", svc.Name, back.UID)
	}
	for i, h := range argoHistory(third) {
		m := h.(map[string]any)
		t.Logf("history %d: revision %v deployed %v initiatedBy %v", i, m["revision"], m["deployedAt"], m["initiatedBy"])
	}
}
