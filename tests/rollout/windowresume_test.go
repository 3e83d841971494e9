package rollout_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// A window that opens while no rollout runs is caught by the resume
// CronJob, as docs/maintenance-windows.md says: the driver change's
// post-upgrade hook Job, whose deadline comes before the opening, ends
// at once "waiting for window" (exit 0, so helm upgrade succeeds), and
// the chart's resume CronJob (here every minute, its runs' deadline 54 s)
// upgrades the fleet once the window opens, inside it. Everything runs
// in the cluster as the chart renders it; the test only upgrades the
// release and watches.
func TestResumeCronJobCatchesTheWindow(t *testing.T) {
	t.Parallel()
	f := newFleetWith(t, 2, func(p, _ map[string]any) {
		p["maxParallelUpgrades"] = 2
		p["maxUnavailable"] = "100%"
	}, map[string]any{"fullnameOverride": "win-resume", "hooks": map[string]any{
		"activeDeadlineSeconds": 60, // the rollout's --deadline: 54 s
		"resume":                map[string]any{"enabled": true, "schedule": "* * * * *"},
		"preflight":             map[string]any{"enabled": false},
	}})
	ctx := ctxTimeout(t, 12*time.Minute)
	// The rollout pods run on a node that runs them, by hooks.nodeSelector:
	// left to their preference for nodes outside the fleet, they could
	// land on another test's KWOK node, which runs nothing and marks a
	// Job's pod complete.
	hooksLabel := map[string]any{"test.npu-stack.openfuyao.com/hooks": f.ns}
	if _, err := env.AddProcessNodes(ctx, 1, testbed.NodeSpec{Prefix: "ro-cpu", CPU: true, Labels: map[string]string{"test.npu-stack.openfuyao.com/hooks": f.ns}}); err != nil {
		t.Fatal(err)
	}
	f.vals["hooks"].(map[string]any)["nodeSelector"] = hooksLabel
	cordons := f.watchFirstCordons()
	// Two minutes away: well past the hook run's deadline, so that it
	// leaves before the opening however slow the upgrade's setup is.
	w := newTestWindow(t, time.Now().Add(2*time.Minute), 15*time.Minute, "finish")
	f.policy["maintenanceWindows"] = []any{w.values}
	f.vals["driver"].(map[string]any)["version"] = newVersion
	if _, err := env.Helm(f.ns).Upgrade(ctx, f.ns, f.vals, testbed.InstallOptions{Timeout: 3 * time.Minute}); err != nil {
		t.Fatalf("helm upgrade (its rollout hook must end waiting for the window, exit 0): %v", err)
	}
	if time.Now().After(w.start) {
		t.Fatalf("helm upgrade returned after the window opened at %s: nothing left to test", w.start)
	}
	hook := hookJob(ctx, t, f.ns)
	if hook.Status.Succeeded != 1 || hook.Status.CompletionTime == nil || !hook.Status.CompletionTime.Time.Before(w.start) {
		t.Fatalf("the rollout hook Job %s did not succeed before the opening at %s: %+v", hook.Name, w.start, hook.Status)
	}
	if log := jobLog(ctx, t, f.ns, hook.Name); !strings.Contains(log, "rollout waiting for window: maintenance window: closed until "+w.until(w.start)) {
		t.Fatalf("the rollout hook Job %s did not end waiting for the window; its log:\n%s", hook.Name, tail(log, 20))
	}

	// From here on only the CronJob runs the rollout.
	f.waitNodes(ctx, "upgraded by the resume CronJob", func(n *corev1.Node) bool {
		return n.Labels[keys.DriverVersion()] == newVersion && n.Labels[keys.UpgradeState()] == "" && !n.Spec.Unschedulable
	})
	f.checkDone(ctx)
	var firsts []string
	for _, n := range f.names() {
		c := cordons.get()[n]
		if c.Before(w.start) {
			t.Errorf("%s cordoned at %s, before the window opened at %s", n, c.Format(time.RFC3339Nano), w.start.Format(time.RFC3339))
		}
		for _, at := range admissions(ctx, t, n) {
			if !w.contains(at) {
				t.Errorf("%s admitted at %s, outside the window %s-%s", n, at.Format(time.RFC3339), w.start.Format(time.RFC3339), w.end.Format(time.RFC3339))
			}
		}
		firsts = append(firsts, fmt.Sprintf("%s +%s", n, c.Sub(w.start).Round(time.Millisecond)))
	}
	t.Logf("hook Job ended %s before the opening; first cordons after it: %s", w.start.Sub(hook.Status.CompletionTime.Time).Round(time.Second), strings.Join(firsts, ", "))
}

// hookJob is the release's rollout hook Job (the resume CronJob's Jobs
// are labelled rollout-resume).
func hookJob(ctx context.Context, t *testing.T, ns string) *batchv1.Job {
	t.Helper()
	jobs, err := env.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=rollout"})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 1 {
		t.Fatalf("want the one rollout hook Job in %s, found %d", ns, len(jobs.Items))
	}
	return &jobs.Items[0]
}

// jobLog is the log of job's pods, as kubectl logs job/NAME shows it.
func jobLog(ctx context.Context, t *testing.T, ns, job string) string {
	t.Helper()
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range pods.Items {
		rc, err := env.Client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{}).Stream(ctx)
		if err != nil {
			_, _ = fmt.Fprintf(&b, "pod %s on %s: no log: %v\n", p.Name, p.Spec.NodeName, err)
			continue
		}
		_, _ = io.Copy(&b, rc)
		_ = rc.Close()
	}
	return b.String()
}
