package rollout_test

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openfuyao/npu-stack/internal/contract"
)

func TestRolloutTwelveNodesWithinBudget(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 12, func(p, _ map[string]any) {
		p["maxParallelUpgrades"] = 3
		p["maxUnavailable"] = "25%"
	})
	ctx := ctxTimeout(t, 10*time.Minute)
	pre := f.nodes[5].Name()
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, pre, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	inv := f.watchInvariants()
	args := f.upgrade(ctx, newVersion)
	r := f.startRollout(args)
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d:\n%s", code, r.output())
	}
	if !strings.Contains(r.output(), "rollout finished: 12/12 nodes up to date") {
		t.Errorf("rollout must report its result:\n%s", tail(r.output(), 5))
	}
	f.checkDone(ctx, pre)
	for _, n := range f.names() {
		if es := events(ctx, t, n, contract.EventRebootRequired, 1); len(es) != 1 || !strings.Contains(es[0].Message, "reason=upgrade") {
			t.Errorf("%s: want one RebootRequired event with reason=upgrade, got %d (%s)", n, len(es), es[0].Message)
		}
		traceEveryTransition(ctx, t, n)
		events(ctx, t, n, contract.EventRebootCompleted, 1)
	}
	if max, worst := inv.max(); max > 3 {
		t.Errorf("up to %d nodes were unavailable at once (%v); maxUnavailable 25%% of 12 allows 3", max, worst)
	} else {
		t.Logf("at most %d nodes unavailable at once (%v)", max, worst)
	}
	f.checkReRolled(ctx)
	// A rerun finds nothing to do and changes nothing.
	again := f.startRollout(args)
	if code := again.wait(ctx, t); code != 0 {
		t.Fatalf("second rollout exit %d:\n%s", code, again.output())
	}
	f.checkDone(ctx, pre)

	// A chart change that leaves the driver alone (labels, the device
	// plugin's image) never cordons, evicts or reboots anything.
	f.vals["commonLabels"] = map[string]any{"team": "ml-platform"}
	// The new device-plugin tag must be in the registry, or its pods would
	// sit in ImagePullBackOff as on a real cluster.
	if err := env.Registry.PushStandIn(ctx, env.Registry.Host+"/ascendhub/ascend-k8sdeviceplugin:v7.3.1"); err != nil {
		t.Fatal(err)
	}
	f.vals["devicePlugin"] = map[string]any{"image": map[string]any{"tag": "v7.3.1"}}
	args = f.upgrade(ctx, newVersion)
	quiet := f.startRollout(args)
	if code := quiet.wait(ctx, t); code != 0 {
		t.Fatalf("rollout after a non-driver change: exit %d\n%s", code, quiet.output())
	}
	f.checkDone(ctx, pre)
	for _, n := range f.names() {
		if es := events(ctx, t, n, contract.EventRebootRequired, 1); len(es) != 1 || es[0].Count > 1 {
			t.Errorf("%s: a non-driver change asked for another reboot", n)
		}
	}
}

func TestRolloutSurvivesBeingKilled(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 6, func(p, _ map[string]any) {
		p["maxParallelUpgrades"] = 2
		p["maxUnavailable"] = 2
	})
	ctx := ctxTimeout(t, 10*time.Minute)
	inv := f.watchInvariants()
	args := f.upgrade(ctx, newVersion)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for i := 0; i < 10; i++ {
		r := f.startRollout(args)
		delay := time.Duration(300+rng.IntN(2500)) * time.Millisecond
		select {
		case <-r.done:
			t.Fatalf("rollout finished after %d kills, before kill %d; pick shorter delays (exit %d)\n%s", i, i+1, r.code, r.output())
		case <-time.After(delay):
		}
		_ = r.cmd.Process.Signal(syscall.SIGKILL)
		<-r.done
		t.Logf("kill %d after %s", i+1, delay)
	}
	r := f.startRollout(args)
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout after 10 kills: exit %d\n%s", code, r.output())
	}
	f.checkDone(ctx)
	if max, worst := inv.max(); max > 2 {
		t.Errorf("up to %d nodes unavailable at once (%v); maxUnavailable is 2", max, worst)
	}
}

func TestManualModeRebootsOnlyApprovedNodes(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, func(p, _ map[string]any) {
		p["autoUpgrade"] = false
		p["maxParallelUpgrades"] = 0
		p["maxUnavailable"] = "100%"
	})
	ctx := ctxTimeout(t, 8*time.Minute)
	names := f.names()
	// One node approved before the upgrade starts (allowed by the
	// contract): it must go through without waiting.
	approve(t, names[0])
	args := f.upgrade(ctx, newVersion)
	r := f.startRollout(args)
	waitNode(ctx, t, names[0], "the pre-approved node finishes", func(n *corev1.Node) bool {
		return n.Labels[keys.DriverVersion()] == newVersion && n.Labels[keys.UpgradeState()] == ""
	})
	if _, ok := getNode(t, names[0]).Annotations[keys.ApproveReboot()]; ok {
		t.Error("the approval must be consumed by the reboot")
	}
	f.waitNodes(ctx, "others wait in reboot-required", func(n *corev1.Node) bool {
		return n.Name == names[0] || n.Labels[keys.UpgradeState()] == string(contract.StateRebootRequired)
	})
	for _, pn := range f.nodes[1:] {
		if st, _ := pn.Host().State(); st.Reboots != 0 {
			t.Fatalf("%s rebooted without approval", pn.Name())
		}
	}
	// The documented command, verbatim: approve every NPU node at once.
	kubectl := filepath.Join(env.BinDir, "kubectl")
	cmd := exec.CommandContext(ctx, "sh", "-c", "kubectl get nodes -l openfuyao.com/npu.present -o name | xargs -I{} kubectl annotate {} npu.openfuyao.com/approve-reboot=true --overwrite")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "PATH="+filepath.Dir(kubectl)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("documented approve command: %v\n%s", err, out)
	}
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d:\n%s", code, r.output())
	}
	f.checkDone(ctx)
	// names[0] was done before the bulk approval: the rollout removes the
	// approval no reboot used, so it cannot authorise a later recovery.
	for _, n := range names {
		if _, ok := getNode(t, n).Annotations[keys.ApproveReboot()]; ok {
			t.Errorf("%s: approval left after the rollout", n)
		}
	}
}

func TestNodeThatNeverReturnsFailsAndBudgetStops(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 4, func(p, _ map[string]any) {
		p["maxParallelUpgrades"] = 1
		p["maxUnavailable"] = "100%"
		p["maxFailures"] = 1
		p["rebootTimeoutSeconds"] = 60
	})
	ctx := ctxTimeout(t, 8*time.Minute)
	names := f.names()
	// The second node in order never comes back from its reboot.
	f.nodes[1].LoseOnReboot()
	args := f.upgrade(ctx, newVersion)
	r := f.startRollout(args)
	code := r.wait(ctx, t)
	if code != 2 {
		t.Fatalf("a spent failure budget must end the rollout with exit 2, got %d:\n%s", code, r.output())
	}
	out := r.output()
	for _, want := range []string{"rollout cannot finish", names[1], "did not come back within 1m0s", "failure budget spent"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary must mention %q:\n%s", want, tail(out, 10))
		}
	}
	lost := getNode(t, names[1])
	if lost.Labels[keys.UpgradeState()] != string(contract.StateFailed) || lost.Annotations[keys.UpgradeFailureStep()] != "reboot" {
		t.Fatalf("lost node: state %q step %q", lost.Labels[keys.UpgradeState()], lost.Annotations[keys.UpgradeFailureStep()])
	}
	if getNode(t, names[0]).Labels[keys.DriverVersion()] != newVersion {
		t.Error("the node before the lost one must have finished")
	}
	for _, n := range names[2:] {
		node := getNode(t, n)
		if node.Labels[keys.UpgradeState()] != string(contract.StateUpgradeRequired) || node.Spec.Unschedulable {
			t.Errorf("%s: state %q cordoned %t; with the budget spent it must stay queued and schedulable", n, node.Labels[keys.UpgradeState()], node.Spec.Unschedulable)
		}
	}

	// With a larger budget the others finish; the lost node stays failed.
	f.policy["maxFailures"] = 2
	args = f.upgrade(ctx, newVersion)
	r = f.startRollout(args)
	if code := r.wait(ctx, t); code != 2 {
		t.Fatalf("with a failed node left the rollout exits 2, got %d:\n%s", code, r.output())
	}
	for _, n := range []string{names[0], names[2], names[3]} {
		if v := getNode(t, n).Labels[keys.DriverVersion()]; v != newVersion {
			t.Errorf("%s: driver %q, want %s", n, v, newVersion)
		}
	}
	if !strings.Contains(r.output(), "driver-upgrade-state=upgrade-required") {
		t.Errorf("the summary must say how to retry the failed node:\n%s", tail(r.output(), 5))
	}
}

func approve(t *testing.T, node string) {
	t.Helper()
	patch := `{"metadata":{"annotations":{"` + keys.ApproveReboot() + `":"true"}}}`
	if _, err := env.Client.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := env.Client.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
