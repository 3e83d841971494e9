package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// argoSyncNow is docs/deployers.md's retry of a failed automated sync
// without the argocd CLI: an operation written on the Application, as
// `argocd app sync` does. It needs the Application's name appended.
const argoSyncNow = `kubectl -n argocd patch application --type merge -p '{"operation":{"initiatedBy":{"username":"admin"},"sync":{"syncStrategy":{"hook":{}}}}}' `

// runArgoFailures: what an Argo CD user sees when a sync of the chart in
// its default hook mode fails, and the documented retry bringing the fleet
// home, on the story's fleet (every node on v1 after two reboots):
//   - preflight refuses (the new driver's image is not mirrored): the
//     operation Failed with the PreSync preflight Job Failed, and automated
//     sync does not try the same desired state again; mirror the image and
//     start a sync;
//   - the application controller killed (SIGKILL) while the PostSync
//     rollout hook waits for approvals: the operation stays Running in the
//     Application's status, the rollout Job goes on; approve, restart the
//     controller, and the same operation completes;
//   - the rollout past its deadline (nobody approves): the operation Failed
//     with the PostSync rollout Job Failed; approve and restore the
//     deadline in the values, a new desired state automated sync applies.
//
// Each ends with every node on the new driver, rebooted exactly once more.
func runArgoFailures(ctx context.Context, t *testing.T, s *stack, d *argoDeployer) {
	reboots := 2
	s.preCordoned = ""
	kubectl(ctx, t, "kubectl uncordon "+s.nodes[0].Name())
	step := func(name string, f func()) {
		start := time.Now()
		f()
		t.Logf("failure story %s: %.0f s", name, time.Since(start).Seconds())
	}
	values := func(version string, deadline any) map[string]any {
		s.setVersion(version)
		vals := mergeValues(normalize(t, d.first), normalize(t, s.vals))
		vals["hooks"].(map[string]any)["activeDeadlineSeconds"] = deadline
		delete(vals["hooks"].(map[string]any), "mode")
		return vals
	}
	deadline := s.vals["hooks"].(map[string]any)["activeDeadlineSeconds"]

	step("PreflightRefuses", func() {
		d.patchValues(ctx, t, values(vRefused, deadline))
		a := d.waitOperation(ctx, t, "Failed")
		d.checkHookFailed(t, a, "PreSync", "-preflight")
		s.check(ctx, v1, reboots)
		s.mirror(ctx, vRefused)
		kubectl(ctx, t, argoSyncNow+d.s.release)
		stop := s.approveEach(ctx)
		d.syncs++
		d.waiter(ctx, t, d.s.release, vRefused, d.syncs)()
		stop()
		reboots++
		s.check(ctx, vRefused, reboots)
	})

	step("ControllerKilledMidHook", func() {
		s.mirror(ctx, vKilled)
		d.patchValues(ctx, t, values(vKilled, deadline))
		s.waitRebootAsked(ctx) // the PostSync rollout hook runs
		before, err := d.apps.Get(ctx, d.s.release, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		started, _, _ := unstructured.NestedString(before.Object, "status", "operationState", "startedAt")
		if err := d.argo.KillController(); err != nil {
			t.Fatal(err)
		}
		t.Logf("application controller killed during the operation started %s: %s", started, testbed.ApplicationState(before))
		kubectl(ctx, t, seedApproveAll)
		s.waitFleet(ctx, vKilled)
		if err := d.argo.StartController(ctx); err != nil {
			t.Fatal(err)
		}
		d.syncs++
		d.waiter(ctx, t, d.s.release, vKilled, d.syncs)()
		after, err := d.apps.Get(ctx, d.s.release, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, _, _ := unstructured.NestedString(after.Object, "status", "operationState", "startedAt"); got != started {
			t.Errorf("after the restart the operation started %s, want the one killed mid-hook (%s) resumed", got, started)
		}
		reboots++
		s.check(ctx, vKilled, reboots)
	})

	step("RolloutPastDeadline", func() {
		s.mirror(ctx, vDeadline)
		d.patchValues(ctx, t, values(vDeadline, 60)) // the schema's minimum; nobody approves
		a := d.waitOperation(ctx, t, "Failed")
		d.checkHookFailed(t, a, "PostSync", "-rollout")
		kubectl(ctx, t, seedApproveAll)
		d.patchValues(ctx, t, values(vDeadline, deadline))
		d.syncs++
		d.waiter(ctx, t, d.s.release, vDeadline, d.syncs)()
		reboots++
		s.check(ctx, vDeadline, reboots)
	})
}

// patchValues replaces the Application's valuesObject, as a commit does.
func (d *argoDeployer) patchValues(ctx context.Context, t *testing.T, vals map[string]any) {
	t.Helper()
	patch, err := json.Marshal([]map[string]any{{"op": "replace", "path": "/spec/source/helm/valuesObject", "value": vals}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.apps.Patch(ctx, d.s.release, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitOperation waits for the Application's current operation, started
// after the last change of its spec, to end in phase.
func (d *argoDeployer) waitOperation(ctx context.Context, t *testing.T, phase string) *unstructured.Unstructured {
	t.Helper()
	a, err := d.argo.WaitApplication(ctx, d.s.release, func(a *unstructured.Unstructured) (bool, error) {
		op, _, _ := unstructured.NestedMap(a.Object, "status", "operationState")
		vals, _, _ := unstructured.NestedMap(a.Object, "status", "operationState", "syncResult", "source", "helm", "valuesObject")
		want, _, _ := unstructured.NestedMap(a.Object, "spec", "source", "helm", "valuesObject")
		if op["phase"] != phase || valuesVersion(vals) != valuesVersion(want) {
			return false, fmt.Errorf("operation %v %v (driver %s), want %s of driver %s", op["phase"], op["message"], valuesVersion(vals), phase, valuesVersion(want))
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Application: %s", testbed.ApplicationState(a))
	return a
}

// checkHookFailed: the operation's result lists the Job hook of hookType
// whose name ends in suffix as Failed, with Argo CD's message.
func (d *argoDeployer) checkHookFailed(t *testing.T, a *unstructured.Unstructured, hookType, suffix string) {
	t.Helper()
	res, _, _ := unstructured.NestedSlice(a.Object, "status", "operationState", "syncResult", "resources")
	for _, r := range res {
		m, _ := r.(map[string]any)
		if name, _ := m["name"].(string); m["hookType"] == hookType && m["kind"] == "Job" && strings.HasSuffix(name, suffix) {
			t.Logf("%s hook Job %s: %v: %v", hookType, name, m["hookPhase"], m["message"])
			if m["hookPhase"] != "Failed" {
				t.Errorf("%s hook Job %s ended %v, want Failed", hookType, name, m["hookPhase"])
			}
			return
		}
	}
	t.Errorf("the failed operation lists no %s hook Job *%s: %v", hookType, suffix, res)
}
