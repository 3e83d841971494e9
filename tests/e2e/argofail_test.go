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

// runArgoFailures: what an Argo CD user sees when a sync of the chart in
// its default hook mode fails, and how the fleet comes home, on the
// story's fleet (every node on v1 after two reboots). Argo CD v3.6 retries
// a failed automated sync 5 times by default (5 s backoff, doubling;
// controller/appcontroller.go), each retry a fresh run of the hooks:
//   - preflight refuses (the new driver's image is not mirrored): the
//     operation Running "... Retrying attempt #1 ..." with the PreSync
//     preflight Job Failed, no node touched; mirror the image and the
//     next retry goes through;
//   - the application controller killed (SIGKILL) while the PostSync
//     rollout hook waits for approvals: the operation stays Running in the
//     Application, the rollout Job goes on; approve, restart the
//     controller, and the same operation completes;
//   - the rollout past its deadline (nobody approves): "Retrying attempt
//     #1" with the PostSync rollout Job Failed; approve, and a retry of
//     the resumable rollout finishes.
//
// Each ends with every node on the new driver, rebooted exactly once more.
// Once the retries are spent the operation is Failed and automated sync
// leaves that desired state alone (docs/deployers.md: start a sync).
func runArgoFailures(ctx context.Context, t *testing.T, s *stack, d *argoDeployer) {
	reboots := 2
	vRefused, vKilled, vDeadline := s.failVersions()
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
		d.waitRetrying(ctx, t, "PreSync", "-preflight")
		s.checkNodes(ctx, v1, reboots)
		s.mirror(ctx, vRefused)
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
		kubectl(ctx, t, s.approveAll())
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
		d.waitRetrying(ctx, t, "PostSync", "-rollout")
		kubectl(ctx, t, s.approveAll())
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

// waitRetrying waits until Argo CD reports the operation for the
// Application's current values failed and scheduled for a retry, the Job
// hook of hookType whose name ends in suffix Failed, and returns it.
func (d *argoDeployer) waitRetrying(ctx context.Context, t *testing.T, hookType, suffix string) *unstructured.Unstructured {
	t.Helper()
	a, err := d.argo.WaitApplication(ctx, d.s.release, func(a *unstructured.Unstructured) (bool, error) {
		op, _, _ := unstructured.NestedMap(a.Object, "status", "operationState")
		vals, _, _ := unstructured.NestedMap(a.Object, "status", "operationState", "syncResult", "source", "helm", "valuesObject")
		want, _, _ := unstructured.NestedMap(a.Object, "spec", "source", "helm", "valuesObject")
		msg, _ := op["message"].(string)
		if valuesVersion(vals) != valuesVersion(want) || !strings.Contains(msg, "Retrying attempt #") || hookPhase(a, hookType, suffix) != "Failed" {
			return false, fmt.Errorf("operation %v %q (driver %s), %s hook *%s %q; want a retry of driver %s after the hook Failed",
				op["phase"], msg, valuesVersion(vals), hookType, suffix, hookPhase(a, hookType, suffix), valuesVersion(want))
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	op, _, _ := unstructured.NestedMap(a.Object, "status", "operationState")
	t.Logf("Argo CD: operation %v: %v; %s", op["phase"], op["message"], hookMessage(a, hookType, suffix))
	return a
}

// hookPhase is the phase of the operation's Job hook of hookType whose
// name ends in suffix ("" if none).
func hookPhase(a *unstructured.Unstructured, hookType, suffix string) string {
	if m := hookResult(a, hookType, suffix); m != nil {
		p, _ := m["hookPhase"].(string)
		return p
	}
	return ""
}

func hookMessage(a *unstructured.Unstructured, hookType, suffix string) string {
	if m := hookResult(a, hookType, suffix); m != nil {
		return fmt.Sprintf("%s hook Job %v: %v: %v", hookType, m["name"], m["hookPhase"], m["message"])
	}
	return "no " + hookType + " hook *" + suffix
}

func hookResult(a *unstructured.Unstructured, hookType, suffix string) map[string]any {
	res, _, _ := unstructured.NestedSlice(a.Object, "status", "operationState", "syncResult", "resources")
	for _, r := range res {
		m, _ := r.(map[string]any)
		if name, _ := m["name"].(string); m["hookType"] == hookType && m["kind"] == "Job" && strings.HasSuffix(name, suffix) {
			return m
		}
	}
	return nil
}
