package rollout_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// waitOutput polls a rollout's log until it contains want.
func waitOutput(ctx context.Context, t *testing.T, r *rolloutProc, want string) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(r.output(), want) {
		select {
		case <-ctx.Done():
			t.Fatalf("rollout never logged %q: %v\n%s", want, ctx.Err(), tail(r.output(), 20))
		case <-r.done:
			t.Fatalf("rollout exited (%d) without logging %q\n%s", r.code, want, tail(r.output(), 20))
		case <-tick.C:
		}
	}
}

// TestNewerPolicyWinsAtOnce: the resume run holds the lease, its node
// waiting for an approval, when a newer upgrade pauses the rollout. The
// newer hook waits for the lease, but its policy applies at once: the
// running resume run switches to it, finishes the node in flight, starts
// no other and ends paused; the hook then ends paused too.
func TestNewerPolicyWinsAtOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 3, func(p, _ map[string]any) {
		p["autoUpgrade"] = false
		p["maxParallelUpgrades"] = 1
		p["maxUnavailable"] = "100%"
	})
	ctx := ctxTimeout(t, 8*time.Minute)
	names := f.names()
	args := f.upgrade(ctx, newVersion)
	resume := f.startRollout(args, "--resume")
	waitNode(ctx, t, names[0], "the first node waits for its approval", func(n *corev1.Node) bool {
		return n.Labels[keys.UpgradeState()] == string(contract.StateRebootRequired)
	})

	f.policy["paused"] = true
	hookArgs := f.upgrade(ctx, newVersion)
	hook := f.startRollout(hookArgs, "--lease-identity=hook-"+f.ns)
	// A watch event: seconds, not minutes.
	waitOutput(ctxTimeout(t, time.Minute), t, resume, "the rollout policy changed")
	approve(t, names[0])
	if code := resume.wait(ctx, t); code != 0 || !strings.Contains(resume.output(), "rollout paused") {
		t.Fatalf("the resume run must end paused under the newer policy: exit %d\n%s", code, tail(resume.output(), 20))
	}
	if code := hook.wait(ctx, t); code != 0 || !strings.Contains(hook.output(), "rollout paused") {
		t.Fatalf("the newer hook: exit %d\n%s", code, tail(hook.output(), 20))
	}
	if v := getNode(t, names[0]).Labels[keys.DriverVersion()]; v != newVersion {
		t.Errorf("the node in flight must finish: driver %q", v)
	}
	for i, n := range names[1:] {
		node := getNode(t, n)
		st, err := f.nodes[i+1].Host().State()
		if err != nil {
			t.Fatal(err)
		}
		if node.Spec.Unschedulable || node.Labels[keys.UpgradeState()] != string(contract.StateUpgradeRequired) || st.Reboots != 0 {
			t.Errorf("%s was started after the pause: state %q, cordoned %t, %d reboots", n, node.Labels[keys.UpgradeState()], node.Spec.Unschedulable, st.Reboots)
		}
	}
}
