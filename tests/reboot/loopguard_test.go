package reboot_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/budget"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// The loop guard counts only reboots that did not achieve their purpose
// (issue 18): an upgrade reboot after which the wanted driver version is
// loaded, or a recovery reboot after which the chips probe healthy, is no
// loop, however many a busy hour brings; a fault no reboot fixes is still
// stopped after the budget.

// refusals watches node for a RebootRefused event: the returned context
// ends as soon as one shows up (or ctx ends), refused then returns its
// message ("" if none came), and stop ends the watch.
func refusals(ctx context.Context, node string) (watch context.Context, refused func() string, stop func()) {
	watch, cancel := context.WithCancel(ctx)
	var msg string
	found := make(chan struct{})
	go func() {
		err := testbed.WaitFor(watch, eventsLW(node, contract.EventRebootRefused), &corev1.Event{}, func(evs []*corev1.Event) (bool, error) {
			if len(evs) > 0 {
				msg = evs[0].Message
				return true, nil
			}
			return false, nil
		})
		if err == nil {
			close(found) // before the cancel: whoever sees watch end sees msg
		}
		cancel()
	}()
	return watch, func() string {
		select {
		case <-found:
			return msg
		default:
			return ""
		}
	}, cancel
}

// waitNodeUnrefused is waitNode failing at once, with the event's
// message, should node get a RebootRefused event meanwhile.
func waitNodeUnrefused(ctx context.Context, t *testing.T, name, what string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	watch, refused, stop := refusals(ctx, name)
	defer stop()
	var last *corev1.Node
	err := testbed.WaitFor(watch, cache.NewListWatchFromClient(env.Client.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", name)),
		&corev1.Node{}, func(ns []*corev1.Node) (bool, error) {
			for _, n := range ns {
				last = n
				if cond(n) {
					return true, nil
				}
			}
			return false, nil
		})
	if err != nil {
		if m := refused(); m != "" {
			t.Fatalf("node %s: %s: the loop guard refused a reboot: %s", name, what, m)
		}
		desc := "no node"
		if last != nil {
			desc = fmt.Sprintf("labels %v annotations %v unschedulable %v", last.Labels, last.Annotations, last.Spec.Unschedulable)
		}
		t.Fatalf("node %s: %s: %v (%s)", name, what, err, desc)
	}
	return last
}

// rollout runs `npu-hooks rollout` with the arguments of rel's rollout
// hook, as the post-upgrade/post-rollback hook does, and waits for it to
// exit 0. A RebootRefused event on node fails the test at once: the
// rollout would wait for the refused reboot until its deadline, as the
// hook did under `helm upgrade` in issue 18.
func rollout(ctx context.Context, t *testing.T, ns string, rel *release.Release, node string) {
	t.Helper()
	var args []string
	for _, h := range rel.Hooks {
		if !strings.HasSuffix(h.Name, "-rollout") {
			continue
		}
		var job batchv1.Job
		if err := yaml.Unmarshal([]byte(h.Manifest), &job); err != nil {
			t.Fatalf("decode the rollout hook: %v", err)
		}
		args = job.Spec.Template.Spec.Containers[0].Args
	}
	if args == nil {
		t.Fatalf("release %s revision %d has no rollout hook", rel.Name, rel.Version)
	}
	logf, err := os.CreateTemp(t.TempDir(), "rollout-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(filepath.Join(env.ProductBinDir, "npu-hooks"), append(args, "--lease-identity=rollout-"+ns, "--lease-duration=5s")...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	output := func() string { b, _ := os.ReadFile(logf.Name()); return testbed.Tail(string(b), 30) }
	watch, refused, stop := refusals(ctx, node)
	defer stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("rollout of revision %d: %v\n%s", rel.Version, err, output())
		}
	case <-watch.Done():
		_ = cmd.Process.Kill()
		if err := <-done; err == nil {
			t.Logf("rollout of revision %d ended before the kill", rel.Version)
		}
		if m := refused(); m != "" {
			t.Fatalf("rollout of revision %d: the loop guard refused a reboot: %s\n%s", rel.Version, m, output())
		}
		t.Fatalf("rollout of revision %d did not finish: %v\n%s", rel.Version, ctx.Err(), output())
	}
}

// history is node's reboot history as the rebooter wrote it.
func history(t *testing.T, n *corev1.Node) budget.History {
	t.Helper()
	h, err := budget.Parse(n.Annotations[keys.RebootHistory()])
	if err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	return h
}

// newest reports whether the newest entry of n's history is for reason
// (and version), judged o, and started after after.
func newest(n *corev1.Node, reason, version string, o budget.Outcome, after time.Time) bool {
	h, err := budget.Parse(n.Annotations[keys.RebootHistory()])
	if err != nil || len(h) == 0 {
		return false
	}
	e := h[len(h)-1]
	return e.Reason == reason && e.Version == version && e.Outcome == o && e.At.After(after)
}

// TestLoopGuardLetsUpgradeRebootsThatLoadTheirVersionThrough is issue 18:
// upgrade to 25.5.0, helm rollback, upgrade to 25.6.0, then to 25.7.0, all
// within the hour with the budget at 3 reboots per hour. Every reboot
// loads the version it was for, so none counts and all four rollouts
// finish.
func TestLoopGuardLetsUpgradeRebootsThatLoadTheirVersionThrough(t *testing.T) {
	ctx := ctxTimeout(t, 15*time.Minute)
	start := time.Now()
	var vals map[string]any
	f := newFleetWith(t, 1, func(r, _, up map[string]any) {
		r["rebootBudget"] = map[string]any{"maxReboots": 3, "windowMinutes": 60}
		up["autoUpgrade"], up["maxUnavailable"], up["rebootTimeoutSeconds"] = true, 1, 600
	}, func(v map[string]any) {
		// The driver of the version the node boots with (startFleet's
		// 25.3.0), its gate and health-watch, and the rebooter.
		v["driver"] = map[string]any{"enabled": true, "version": "25.3.0", "upgradePolicy": v["driver"].(map[string]any)["upgradePolicy"]}
		v["healthWatch"] = map[string]any{"probeIntervalSeconds": 1, "probeTimeoutSeconds": 1, "failureThreshold": 2}
		vals = v
	})
	node := f.nodes[0]
	name := node.Name()
	waitNode(ctx, t, name, "driver 25.3.0 ready", func(n *corev1.Node) bool {
		return n.Labels[keys.DriverVersion()] == "25.3.0" && n.Labels[keys.DriverReady()] == contract.True
	})
	helm := env.Helm(f.ns)
	upgrade := func(version string) *release.Release {
		vals["driver"].(map[string]any)["version"] = version
		rel, err := helm.Upgrade(ctx, f.ns, vals, testbed.InstallOptions{DisableHooks: true})
		if err != nil {
			t.Fatal(err)
		}
		return rel
	}
	rollback := func(revision int) *release.Release {
		if err := helm.Rollback(f.ns, revision, testbed.InstallOptions{DisableHooks: true}); err != nil {
			t.Fatal(err)
		}
		rel, err := helm.Status(f.ns)
		if err != nil {
			t.Fatal(err)
		}
		return rel
	}
	steps := []struct {
		what, version string
		run           func() *release.Release
	}{
		{"helm upgrade --set driver.version=25.5.0", "25.5.0", func() *release.Release { return upgrade("25.5.0") }},
		{"helm rollback 1", "25.3.0", func() *release.Release { return rollback(1) }},
		{"helm upgrade --set driver.version=25.6.0", "25.6.0", func() *release.Release { return upgrade("25.6.0") }},
		{"helm upgrade --set driver.version=25.7.0", "25.7.0", func() *release.Release { return upgrade("25.7.0") }},
	}
	var last time.Time
	for i, s := range steps {
		rollout(ctx, t, f.ns, s.run(), name)
		// The rebooter recorded the reboot for the version the rollout
		// wanted and, the version loaded, judged it ok.
		n := waitNodeUnrefused(ctx, t, name, s.what+": reboot judged ok", func(n *corev1.Node) bool {
			return n.Labels[keys.DriverVersion()] == s.version && newest(n, "upgrade", s.version, budget.OK, last)
		})
		h := history(t, n)
		last = h[len(h)-1].At
		if st := hostState(t, node); st.Reboots != i+1 || st.LoadedDriver != s.version {
			t.Fatalf("after %s: %d reboots with driver %q loaded, want %d and %s", s.what, st.Reboots, st.LoadedDriver, i+1, s.version)
		}
		if n.Spec.Unschedulable {
			t.Fatalf("after %s the node is still cordoned", s.what)
		}
	}
	if took := time.Since(start); took > time.Hour {
		t.Fatalf("the four reboots took %s, more than the budget's window", took)
	}
	if evs := events(t, name, contract.EventRebootRefused); len(evs) != 0 {
		t.Fatalf("RebootRefused: %s", evs[0].Message)
	}
	n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range history(t, n) {
		if e.Counts() {
			t.Errorf("history %q: entry %s counts, want every reboot judged ok", n.Annotations[keys.RebootHistory()], e)
		}
	}
}

// TestLoopGuardLetsHealedRecoveriesThroughAndStopsAStickyWedge: with
// automatic recovery and a budget of 2 per hour, three recoveries after
// which the chips probe healthy do not count; then a wedge that comes
// back after every boot is rebooted twice and refused, naming the count,
// the window and the reset command.
func TestLoopGuardLetsHealedRecoveriesThroughAndStopsAStickyWedge(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Minute)
	f := newJointFleet(t, 1, func(r, rec, _ map[string]any) {
		rec["autoRecover"] = true
		r["rebootBudget"] = map[string]any{"maxReboots": 2, "windowMinutes": 60}
	})
	node := f.nodes[0]
	name := node.Name()
	var last time.Time
	for i := 1; i <= 3; i++ {
		before := bootID(t, name)
		if err := node.Host().Wedge(0); err != nil {
			t.Fatal(err)
		}
		n := waitNodeUnrefused(ctx, t, name, fmt.Sprintf("recovery %d healed, judged ok and uncordoned", i), func(n *corev1.Node) bool {
			return rebooted(before)(n) && n.Labels[keys.DriverReady()] == contract.True && !n.Spec.Unschedulable &&
				newest(n, "recovery", "", budget.OK, last)
		})
		h := history(t, n)
		last = h[len(h)-1].At
	}
	if st := hostState(t, node); st.Reboots != 3 {
		t.Fatalf("host rebooted %d times, want 3 recoveries", st.Reboots)
	}

	// A fault no reboot fixes: the watch reports it again after every boot.
	if err := node.Host().Update(func(st *simhost.State) error { st.StickyWedge = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := node.Host().Wedge(0); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(ctx, t, name, contract.EventRebootRefused, "2 reboots within 1h0m0s did not achieve their purpose")
	for _, want := range []string{"recovery at", "kubectl annotate node " + name + " " + keys.RebootHistory() + "-"} {
		if !strings.Contains(ev.Message, want) {
			t.Errorf("RebootRefused %q does not name %q", ev.Message, want)
		}
	}
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("RebootRefused is %s, want Warning", ev.Type)
	}
	if st := hostState(t, node); st.Reboots != 5 {
		t.Fatalf("host rebooted %d times, want 3 healed recoveries and the budget of 2", st.Reboots)
	}
	n := waitNode(ctx, t, name, "still wedged and cordoned", healthWatchWedged)
	if !n.Spec.Unschedulable {
		t.Error("a node refused by the loop guard was uncordoned while wedged")
	}
	ok, counted := 0, 0
	for _, e := range history(t, n) {
		switch {
		case e.Outcome == budget.OK && e.Reason == "recovery":
			ok++
		case e.Counts():
			counted++
		}
	}
	if ok < 2 || counted != 2 {
		t.Errorf("history %q: want the healed recoveries kept as ok and the two sticky ones counted", n.Annotations[keys.RebootHistory()])
	}
}
