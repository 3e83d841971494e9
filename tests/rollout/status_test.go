package rollout_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/openfuyao/npu-stack/internal/budget"
	"github.com/openfuyao/npu-stack/internal/contract"
)

// statusArgs are the flags of the rollout's args that status shares.
func statusArgs(args []string) []string {
	out := []string{"status", "-o", "json"}
	for _, a := range args {
		for _, p := range []string{"--namespace=", "--label-domain=", "--npu-node-selector=", "--driver-selector=", "--auto-upgrade="} {
			if strings.HasPrefix(a, p) {
				out = append(out, a)
			}
		}
	}
	return out
}

// statusNote runs `npu-hooks status -o json` and checks node's note
// contains every part.
func statusNote(ctx context.Context, t *testing.T, args []string, node string, parts ...string) {
	t.Helper()
	st := rolloutStatus(ctx, t, args)
	for _, row := range st.Nodes {
		if row.Node != node {
			continue
		}
		for _, p := range parts {
			if !strings.Contains(row.Note, p) {
				t.Errorf("status note of %s: %q, want it to contain %q", node, row.Note, p)
			}
		}
		return
	}
	t.Fatalf("status lists no node %s: %+v", node, st.Nodes)
}

// TestStatusNamesAnInvalidApproval: approve-reboot=yes is no approval;
// status says so and how to approve, and approving with "true" goes on.
func TestStatusNamesAnInvalidApproval(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, func(p, _ map[string]any) { p["autoUpgrade"] = false })
	ctx := ctxTimeout(t, 6*time.Minute)
	node := f.nodes[0].Name()
	args := f.upgrade(ctx, newVersion)
	r := f.startRollout(args)
	waitNode(ctx, t, node, "reboot-required", func(n *corev1.Node) bool {
		return n.Labels[keys.UpgradeState()] == string(contract.StateRebootRequired)
	})
	kubectlAnnotate(ctx, t, node, keys.ApproveReboot(), "yes")
	statusNote(ctx, t, args, node, `approve-reboot="yes" is not an approval`, "kubectl annotate node "+node+" "+keys.ApproveReboot()+"=true --overwrite")
	kubectlAnnotate(ctx, t, node, keys.ApproveReboot(), "true")
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d:\n%s", code, tail(r.output(), 20))
	}
	f.checkDone(ctx)
}

// TestStatusNamesThePodDisruptionBudget: an NPU pod whose budget refuses
// its eviction holds the node in pod-deletion; status names the pod and
// the fix, and the rollout goes on once the budget allows it.
func TestStatusNamesThePodDisruptionBudget(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 6*time.Minute)
	// force: the pod is a bare one (no controller), which drain removes
	// only with force, and still through the eviction API.
	f := newFleet(t, 1, func(p, _ map[string]any) { p["npuPodDeletion"] = map[string]any{"force": true, "timeoutSeconds": 300} })
	node := f.nodes[0].Name()
	labels := map[string]string{"app": "train"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "train-0", Namespace: f.ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "train", Image: env.Product.PauseImage,
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("1")}}}}},
	}
	if _, err := env.Client.CoreV1().Pods(f.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zero := intstr.FromInt32(0)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: f.ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(f.ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	args := f.upgrade(ctx, newVersion)
	r := f.startRollout(args)
	events(ctx, t, node, contract.EventEvictionBlocked, 1)
	statusNote(ctx, t, args, node, "EvictionBlocked", "pod "+f.ns+"/train-0", "PodDisruptionBudget")
	if err := env.Client.PolicyV1().PodDisruptionBudgets(f.ns).Delete(ctx, "train", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d:\n%s", code, tail(r.output(), 20))
	}
	f.checkDone(ctx)
}

func kubectlAnnotate(ctx context.Context, t *testing.T, node, key, value string) {
	t.Helper()
	patch := `{"metadata":{"annotations":{"` + key + `":"` + value + `"}}}`
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestStatusNamesTheLoopGuard: a node whose recent reboots failed their
// purpose is refused a further one; status shows the rebooter's refusal
// with the reset command, and resetting the history lets the rollout on.
func TestStatusNamesTheLoopGuard(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	ctx := ctxTimeout(t, 6*time.Minute)
	node := f.nodes[0].Name()
	var h budget.History
	for _, ago := range []time.Duration{40, 30, 20} {
		h = append(h, budget.Entry{At: time.Now().Add(-ago * time.Minute), Reason: string(contract.ReasonRecovery), Outcome: budget.Failed})
	}
	kubectlAnnotate(ctx, t, node, keys.RebootHistory(), h.String())
	args := f.upgrade(ctx, newVersion)
	r := f.startRollout(args)
	events(ctx, t, node, contract.EventRebootRefused, 1)
	statusNote(ctx, t, args, node, "RebootRefused", "loop guard", "kubectl annotate node "+node+" "+keys.RebootHistory()+"-")
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, node, types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/metadata/annotations/`+strings.ReplaceAll(keys.RebootHistory(), "/", "~1")+`"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d after the reset:\n%s", code, tail(r.output(), 20))
	}
	f.checkDone(ctx)
}
