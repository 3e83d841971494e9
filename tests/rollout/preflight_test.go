package rollout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

const fleetLabel = "test.npu-stack.openfuyao.com/fleet"

// preflightFleet registers KWOK NPU nodes of one test, running driver
// "1.0" (as the driver pod would have labelled them), and returns the
// node selector that picks exactly them.
func preflightFleet(ctx context.Context, t *testing.T, n int, spec testbed.NodeSpec) ([]string, string) {
	t.Helper()
	fleet := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	fleet = fmt.Sprintf("%.40s-%d", fleet, time.Now().UnixNano()%100000)
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels[fleetLabel] = fleet
	spec.Labels[contract.DefaultDomain+"/driver-version"] = "1.0"
	spec.Prefix = "pf"
	names, err := env.AddNPUNodes(ctx, n, spec)
	if err != nil {
		t.Fatal(err)
	}
	return names, contract.LabelNPUPresent + "=true," + fleetLabel + "=" + fleet
}

func profileArg(t *testing.T, name, chip, image string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"name": name, "chip": chip, "kernel": "5.15.0-105-generic", "os": "ubuntu22.04", "nodeSelector": map[string]string{}, "image": image})
	if err != nil {
		t.Fatal(err)
	}
	return "--profile=" + string(b)
}

func preflightArgs(selector string, extra ...string) []string {
	return append([]string{"preflight", "--namespace=npu-operator", "--npu-node-selector=" + selector,
		"--driver-version=2.0", "--max-unavailable=25%", "--pull-secret-dir=/nonexistent"}, extra...)
}

func wantRefusal(t *testing.T, r result, parts ...string) {
	t.Helper()
	if r.code != 2 {
		t.Fatalf("preflight must refuse with exit 2, got %s", r)
	}
	for _, p := range parts {
		if !strings.Contains(r.stderr, p) {
			t.Errorf("refusal must mention %q:\n%s", p, r.stderr)
		}
	}
}

func TestPreflightRefusesUncoveredNode(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, time.Minute)
	names, sel := preflightFleet(ctx, t, 2, testbed.NodeSpec{})
	odd, err := env.AddNPUNodes(ctx, 1, testbed.NodeSpec{Prefix: "pf-odd", Chip: "310p", Labels: map[string]string{fleetLabel: strings.Split(sel, "=")[2]}})
	if err != nil {
		t.Fatal(err)
	}
	r := hooks(ctx, t, preflightArgs(sel, profileArg(t, "910b", "910b", "unused"), "--skip-image-check")...)
	wantRefusal(t, r, "node/"+odd[0], "no driver profile covers it", `openfuyao.com/npu.chip="310p"`, "driver.profiles")
	if strings.Contains(r.stderr, "node/"+names[0]+":") {
		t.Errorf("covered node %s must not be reported:\n%s", names[0], r.stderr)
	}
	// Covering the odd node too makes it pass.
	r = hooks(ctx, t, preflightArgs(sel, profileArg(t, "910b", "910b", "unused"), profileArg(t, "310p", "310p", "unused"), "--skip-image-check")...)
	if r.code != 0 || !strings.Contains(r.stdout, "preflight passed: 3 NPU nodes") {
		t.Fatalf("fully covered fleet must pass: %s", r)
	}
}

func TestPreflightRefusesWhenBudgetIsSpent(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, time.Minute)
	names, sel := preflightFleet(ctx, t, 4, testbed.NodeSpec{})
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, names[3], types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	prof := profileArg(t, "910b", "910b", "unused")
	// 25% of 4 = 1, spent by the cordoned node.
	r := hooks(ctx, t, preflightArgs(sel, prof, "--skip-image-check")...)
	wantRefusal(t, r, "policy/maxUnavailable", "budget already spent", names[3], "raise driver.upgradePolicy.maxUnavailable")
	if r := hooks(ctx, t, preflightArgs(sel, prof, "--skip-image-check", "--max-unavailable=2")...); r.code != 0 {
		t.Fatalf("with room in the budget preflight passes: %s", r)
	}
}

func TestPreflightRefusesNPUWorkloadsThatCannotBeStopped(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 2*time.Minute)
	ns := namespace(t)
	names, sel := preflightFleet(ctx, t, 2, testbed.NodeSpec{})
	// A bare pod (no controller) on the NPU: eviction would lose it, so the
	// drain library refuses it unless force is set.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bare-training", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: names[0], Containers: []corev1.Container{{Name: "train", Image: "train:1",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("8")}}}}},
	}
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prof := profileArg(t, "910b", "910b", "unused")
	args := preflightArgs(sel, prof, "--skip-image-check", "--max-unavailable=100%")
	wantRefusal(t, hooks(ctx, t, args...), "node/"+names[0], "NPU workloads cannot be stopped", "bare-training", "force")
	if r := hooks(ctx, t, append(args, "--npu-pod-deletion-force")...); r.code != 0 {
		t.Fatalf("with npuPodDeletion.force the pod may be deleted: %s", r)
	}
	// A node already on the new version is not touched, so its pods are fine.
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, names[0], types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+contract.DefaultDomain+`/driver-version":"2.0"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := hooks(ctx, t, args...); r.code != 0 {
		t.Fatalf("pods on an up-to-date node do not block: %s", r)
	}
}

func TestPreflightRejectsBadArguments(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, time.Minute)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"preflight", "--driver-version=2.0"}, "no --profile given"},
		{[]string{"preflight", "--driver-version=2.0", "--profile={nope"}, "--profile"},
		{[]string{"preflight", "--driver-version=2.0", "--profile={}", "--max-unavailable=lots"}, "--max-unavailable"},
		{[]string{"preflight", "--profile={}"}, "--driver-version is required"},
		{[]string{"preflight", "--driver-version=2.0", "--npu-node-selector=a=(", "--profile={}"}, "--npu-node-selector"},
	} {
		wantBadArguments(ctx, t, tc.args, tc.want)
	}
	prof := profileArg(t, "910b", "910b", "reg.example.com/drv:1")
	wantBadArguments(ctx, t, []string{"preflight", "--driver-version=2.0", prof, "--driver-installer=driver.run"}, `--driver-installer="driver.run": want an absolute path`)
	wantBadArguments(ctx, t, []string{"preflight", "--driver-version=2.0", prof, "--driver-image-tree=Ascend/driver"}, "--driver-image-tree")
}

// wantBadArguments runs npu-hooks with args and wants exit 2 with want
// in its error output.
func wantBadArguments(ctx context.Context, t *testing.T, args []string, want string) {
	t.Helper()
	if r := hooks(ctx, t, args...); r.code != 2 || !strings.Contains(r.stderr, want) {
		t.Errorf("npu-hooks %v: want exit 2 mentioning %q, got %s", args, want, r)
	}
}
