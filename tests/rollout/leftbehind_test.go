package rollout_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/rollout"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/procnode"
)

// waitDriverPodUnready waits until node's driver pod reports not Ready.
func waitDriverPodUnready(ctx context.Context, t *testing.T, ns, node string) {
	t.Helper()
	lw := cache.NewFilteredListWatchFromClient(env.Client.CoreV1().RESTClient(), "pods", ns, func(o *metav1.ListOptions) {
		o.LabelSelector = "app=npu-driver-daemonset"
		o.FieldSelector = "spec.nodeName=" + node
	})
	err := testbed.WaitFor(ctx, lw, &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("driver pod of %s never went unready: %v", node, err)
	}
}

// rolloutStatus runs `npu-hooks status -o json` with the rollout's flags.
func rolloutStatus(ctx context.Context, t *testing.T, args []string) rollout.Status {
	t.Helper()
	r := hooks(ctx, t, statusArgs(args)...)
	if r.code != 0 {
		t.Fatalf("status: %s", r)
	}
	var st rollout.Status
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, r.stdout)
	}
	return st
}

// TestChartChangeWithANodeAwaitingRecoveryApproval: with autoRecover
// false (the default), one node's chips wedge and its recovery reboot
// waits for an approval; its driver pod is not Ready. A chart change that
// leaves the driver alone (the exporter's port) must not wait for that
// node: the rollout finishes in its normal time, exits 0, and names the
// node with the reason in its summary, in status and in an
// UpgradeLeftBehind event. With --nodes-left-behind=fail the same run
// fails.
func TestChartChangeWithANodeAwaitingRecoveryApproval(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, nil)
	ctx := ctxTimeout(t, 8*time.Minute)
	wedged := f.nodes[1]
	if err := wedged.Host().Wedge(0); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, wedged.Name(), "recovery reboot requested", func(n *corev1.Node) bool {
		return n.Labels[keys.RebootRequired()] == contract.True && n.Annotations[keys.RebootReason()] == string(contract.ReasonRecovery)
	})
	waitDriverPodUnready(ctx, t, f.ns, wedged.Name())

	f.vals["exporter"] = map[string]any{"port": 8083}
	args := f.upgrade(ctx, oldVersion)
	// Its normal time: the exporter pods restart; nothing reboots.
	runCtx := ctxTimeout(t, 2*time.Minute)
	r := f.startRollout(args)
	if code := r.wait(runCtx, t); code != 0 {
		t.Fatalf("a chart-only change with a node awaiting recovery: exit %d\n%s", code, tail(r.output(), 30))
	}
	out := r.output()
	for _, want := range []string{"rollout finished", "left behind: " + wedged.Name(), "recovery reboot is pending", keys.ApproveReboot() + "=true"} {
		if !strings.Contains(out, want) {
			t.Errorf("the summary must say %q:\n%s", want, tail(out, 10))
		}
	}
	ev := events(ctx, t, wedged.Name(), contract.EventUpgradeLeftBehind, 1)
	if ev[0].Type != corev1.EventTypeWarning || !strings.Contains(ev[0].Message, "recovery reboot is pending") {
		t.Errorf("UpgradeLeftBehind event: %s %q", ev[0].Type, ev[0].Message)
	}
	st := rolloutStatus(ctx, t, args)
	if len(st.LeftBehind) != 1 || st.LeftBehind[0].Node != wedged.Name() || st.LeftBehind[0].OutOfDate || st.Outcome != rollout.Finished {
		t.Errorf("status: outcome %s, left behind %+v; want finished with %s left behind, driver up to date", st.Outcome, st.LeftBehind, wedged.Name())
	}
	// The wedged node was not touched by the rollout.
	if n := getNode(t, wedged.Name()); n.Labels[keys.UpgradeState()] != "" || n.Annotations[keys.RebootReason()] != string(contract.ReasonRecovery) {
		t.Errorf("the rollout touched the wedged node: state %q, reason %q", n.Labels[keys.UpgradeState()], n.Annotations[keys.RebootReason()])
	}

	f.policy["nodesLeftBehind"] = "fail"
	strict := f.startRollout(f.upgrade(ctx, oldVersion))
	if code := strict.wait(runCtx, t); code != 2 || !strings.Contains(strict.output(), "--nodes-left-behind=fail") {
		t.Fatalf("with --nodes-left-behind=fail a node left behind fails the rollout: exit %d\n%s", code, tail(strict.output(), 10))
	}
}

// stopAsNotReady stops a node's kubelet and reports it NotReady, as the
// node lifecycle controller would after its grace period.
func stopAsNotReady(ctx context.Context, t *testing.T, pn *procnode.Node) {
	t.Helper()
	pn.Stop()
	patch := `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"KubeletStopped","message":"test: kubelet stopped"}]}}`
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, pn.Name(), types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

// TestCanariesThatCannotMove: a NotReady canary and a skipped canary are
// no pending canaries. With no other canary, the other nodes are not
// started (no promotion without a canary that passed) and the rollout
// ends at once, naming the canaries and the fix; once a canary that can
// move is there, it goes first, then the rest, and the two are left behind.
func TestCanariesThatCannotMove(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 4, func(p, _ map[string]any) {
		p["canarySelector"] = "canary=true"
		p["maxUnavailable"] = "100%"
	})
	ctx := ctxTimeout(t, 10*time.Minute)
	down, skipped, good, rest := f.nodes[0], f.nodes[1].Name(), f.nodes[2].Name(), f.nodes[3].Name()
	patchNode(ctx, t, down.Name(), `{"metadata":{"labels":{"canary":"true"}}}`)
	patchNode(ctx, t, skipped, `{"metadata":{"labels":{"canary":"true","`+keys.UpgradeSkip()+`":"true"}}}`)
	stopAsNotReady(ctx, t, down)

	args := f.upgrade(ctx, newVersion)
	runCtx := ctxTimeout(t, 2*time.Minute)
	r := f.startRollout(args)
	if code := r.wait(runCtx, t); code != 2 {
		t.Fatalf("no canary can move: want exit 2 (nodes left behind on the old driver), got %d\n%s", code, tail(r.output(), 20))
	}
	out := r.output()
	for _, want := range []string{"no canary can be upgraded", down.Name() + ": node NotReady", skipped + ": skip label set", "canarySelector", "left behind: " + rest} {
		if !strings.Contains(out, want) {
			t.Errorf("the summary must say %q:\n%s", want, tail(out, 12))
		}
	}
	for _, n := range []string{good, rest} {
		if node := getNode(t, n); node.Spec.Unschedulable || node.Labels[keys.DriverVersion()] != oldVersion {
			t.Errorf("%s was started without a canary having passed", n)
		}
	}

	patchNode(ctx, t, good, `{"metadata":{"labels":{"canary":"true"}}}`)
	f.policy["nodesLeftBehind"] = "always-succeed"
	r = f.startRollout(f.upgrade(ctx, newVersion))
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("with a canary that can move: exit %d\n%s", code, tail(r.output(), 20))
	}
	out = r.output()
	for _, want := range []string{"left behind: " + down.Name(), "left behind: " + skipped} {
		if !strings.Contains(out, want) {
			t.Errorf("the summary must say %q:\n%s", want, tail(out, 12))
		}
	}
	for _, n := range []string{good, rest} {
		if v := getNode(t, n).Labels[keys.DriverVersion()]; v != newVersion {
			t.Errorf("%s: driver %q, want %s", n, v, newVersion)
		}
	}
	// The canary went first: the other node started after it was done.
	canaryDone := lastTransition(ctx, t, good, "→ up-to-date")
	restStart := lastTransition(ctx, t, rest, "upgrade-required → cordon-required")
	if restStart.Before(canaryDone) {
		t.Errorf("%s started at %s, before the canary %s was done at %s", rest, restStart, good, canaryDone)
	}
}

// lastTransition is when node's newest NPUDriverUpgrade event naming step
// was recorded.
func lastTransition(ctx context.Context, t *testing.T, node, step string) time.Time {
	t.Helper()
	var at time.Time
	for _, e := range events(ctx, t, node, contract.EventNPUDriverUpgrade, 1) {
		if strings.Contains(e.Message, step) {
			if ts := eventTime(e); ts.After(at) {
				at = ts
			}
		}
	}
	if at.IsZero() {
		t.Fatalf("%s: no NPUDriverUpgrade event with %q", node, step)
	}
	return at
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.FirstTimestamp.Time
}

// TestDriverDisabledWhileNodesInFlight: nodes wait in reboot-required for
// an approval when driver.enabled is set to false. The running rollout
// gives them back at once: reboot request withdrawn, uncordoned, state
// and bookkeeping removed, an UpgradeAbandoned event saying why; nothing
// reboots.
func TestDriverDisabledWhileNodesInFlight(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2, func(p, _ map[string]any) {
		p["autoUpgrade"] = false
		p["maxParallelUpgrades"] = 0
		p["maxUnavailable"] = "100%"
	})
	ctx := ctxTimeout(t, 8*time.Minute)
	args := f.upgrade(ctx, newVersion)
	r := f.startRollout(args)
	f.waitNodes(ctx, "waiting for approval in reboot-required", func(n *corev1.Node) bool {
		return n.Labels[keys.UpgradeState()] == string(contract.StateRebootRequired) && n.Spec.Unschedulable
	})
	f.vals["driver"].(map[string]any)["enabled"] = false
	f.upgrade(ctx, newVersion)
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d:\n%s", code, tail(r.output(), 20))
	}
	for _, pn := range f.nodes {
		n := getNode(t, pn.Name())
		if n.Spec.Unschedulable {
			t.Errorf("%s left cordoned", n.Name)
		}
		for _, k := range []string{keys.UpgradeState(), keys.RebootRequired()} {
			if v, ok := n.Labels[k]; ok {
				t.Errorf("%s: label %s=%s left behind", n.Name, k, v)
			}
		}
		for _, k := range []string{keys.RebootReason(), keys.UpgradeSince(), keys.UpgradeBootID(), keys.UpgradeWasCordoned(), keys.UpgradeTarget()} {
			if v, ok := n.Annotations[k]; ok {
				t.Errorf("%s: annotation %s=%s left behind", n.Name, k, v)
			}
		}
		ev := events(ctx, t, n.Name, contract.EventUpgradeAbandoned, 1)
		if !strings.Contains(ev[0].Message, "driver.enabled is false") {
			t.Errorf("%s: UpgradeAbandoned %q must say why", n.Name, ev[0].Message)
		}
	}
	st := rolloutStatus(ctx, t, args)
	if st.Outcome != rollout.Finished {
		t.Errorf("status after the give-back: %s", st.Outcome)
	}
	for _, pn := range f.nodes {
		if s, err := pn.Host().State(); err != nil || s.Reboots != 0 {
			t.Errorf("%s: %d reboots (%v); a node given back must not reboot", pn.Name(), s.Reboots, err)
		}
	}
}
