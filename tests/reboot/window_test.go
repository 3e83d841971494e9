package reboot_test

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the windows name their zone, as the binaries do

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// recoveryWindow is a window of recoveryPolicy.maintenanceWindows from
// start for d, in a zone of its own with a half-hour offset
// (Asia/Kolkata), on whole seconds; and its opening as the rebooter
// writes it (RFC 3339 on the window's clock).
func recoveryWindow(t *testing.T, start time.Time, d time.Duration) (map[string]any, time.Time, string) {
	t.Helper()
	loc, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	s := start.In(loc).Truncate(time.Second)
	e := s.Add(d)
	return map[string]any{"days": []any{strings.ToLower(s.Weekday().String()[:3])}, "start": s.Format("15:04:05"), "end": e.Format("15:04:05"), "timeZone": "Asia/Kolkata"},
		s, s.Format(time.RFC3339)
}

// An automatic recovery outside its maintenance window waits: the
// wedged node is cordoned and its NPU pods evicted, a
// MaintenanceWindowClosed event says until when, and nothing reboots; a
// node approved meanwhile reboots at once. Once its window opens, the
// waiting node reboots. The window is moved by a helm upgrade (the
// rebooters restart with it), so the wait is the product's, never the
// test's.
//
// The waiting node's clock runs 10 minutes ahead: its rebooter is the
// one judge of its recovery window, on that clock (as
// docs/maintenance-windows.md says), so it reboots when its own clock
// reaches the opening, 10 minutes before the real time does.
func TestAutomaticRecoveryWaitsForItsWindow(t *testing.T) {
	ctx := ctxTimeout(t, 8*time.Minute)
	const ahead = 10 * time.Minute
	far, farOpening, farUntil := recoveryWindow(t, time.Now().Add(2*time.Hour), 10*time.Minute)
	var vals map[string]any
	f := newFleetWith(t, 2, func(r, rec, _ map[string]any) {
		r["slots"] = 2
		rec["autoRecover"] = true
		rec["maintenanceWindows"] = []any{far}
	}, func(v map[string]any) { vals = v })
	waiting, approved := f.nodes[0], f.nodes[1]
	if err := waiting.Host().SetClockOffset(ahead); err != nil {
		t.Fatal(err)
	}
	npuPod := pod(t, f.ns, "npu-job", waiting.Name(), true)
	beforeWaiting, beforeApproved := bootID(t, waiting.Name()), bootID(t, approved.Name())

	wedge(t, waiting)
	wedge(t, approved)
	approve(t, approved.Name())
	ev := waitEvent(ctx, t, waiting.Name(), contract.EventMaintenanceWindowClosed, "waits for the maintenance window (recoveryPolicy.maintenanceWindows): closed until "+farUntil)
	for _, part := range []string{"reason=recovery", "stays cordoned with its NPU pods evicted", "kubectl annotate node " + waiting.Name()} {
		if !strings.Contains(ev.Message, part) {
			t.Errorf("MaintenanceWindowClosed lacks %q: %s", part, ev.Message)
		}
	}
	// The approved node does not wait for any window.
	waitNode(ctx, t, approved.Name(), "the approved recovery reboots at once", rebooted(beforeApproved))
	if time.Now().After(farOpening) {
		t.Fatal("the test outlived a window two hours away")
	}
	// The waiting node: cordoned, its NPU pod gone, not rebooted.
	n := waitNode(ctx, t, waiting.Name(), "cordoned for its recovery", func(n *corev1.Node) bool {
		return n.Spec.Unschedulable && n.Annotations[keys.RecoveryCordoned()] == contract.True
	})
	if n.Annotations[keys.RebootFromBootID()] != "" || hostState(t, waiting).Reboots != 0 {
		t.Fatalf("%s rebooted outside its window", waiting.Name())
	}
	err := testbed.WaitFor(ctx, testbed.PodsLW(env.Client, f.ns, "app=npu-job"), &corev1.Pod{}, func(ps []*corev1.Pod) (bool, error) {
		return len(ps) == 0 || ps[0].UID != npuPod.UID || ps[0].DeletionTimestamp != nil, nil
	})
	if err != nil {
		t.Fatalf("the NPU pod of the waiting node was not evicted: %v", err)
	}
	if _, err := env.Client.CoreV1().Pods(f.ns).Get(ctx, npuPod.Name, metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}

	// Its window moves to twenty seconds from now on its clock.
	soon, opening, _ := recoveryWindow(t, time.Now().Add(ahead+20*time.Second), 10*time.Minute)
	vals["recoveryPolicy"].(map[string]any)["maintenanceWindows"] = []any{soon}
	if _, err := env.Helm(f.ns).Upgrade(ctx, f.ns, vals, testbed.InstallOptions{DisableHooks: true}); err != nil {
		t.Fatal(err)
	}
	// The rebooter stamps reboot-started-at on its node's clock as it
	// starts the reboot (its Rebooting event may die with the simulated
	// reboot, which kills the process before the event is written); the
	// test sees it no earlier than that, on the real clock.
	var started string
	waitNode(ctx, t, waiting.Name(), "the recovery reboot once its window opened", func(n *corev1.Node) bool {
		started = n.Annotations[keys.RebootStartedAt()]
		return started != "" || rebooted(beforeWaiting)(n)
	})
	seen := time.Now()
	at, err := time.Parse(time.RFC3339, started)
	switch {
	case err != nil:
		t.Fatalf("%s rebooted without its reboot-started-at seen (%q): %v", waiting.Name(), started, err)
	case at.Before(opening):
		t.Fatalf("%s started its reboot at %s on its clock, before its window opened at %s", waiting.Name(), at, opening)
	case !seen.Before(opening):
		t.Fatalf("%s was seen rebooting at %s, when the real time reached its window's opening (%s), not its own clock (%s ahead): the window was not judged on the node's clock", waiting.Name(), seen, opening, ahead)
	}
	waitNode(ctx, t, waiting.Name(), "the recovery reboot done", rebooted(beforeWaiting))
	if st := hostState(t, waiting); st.Reboots != 1 {
		t.Fatalf("%s rebooted %d times, want 1", waiting.Name(), st.Reboots)
	}
	t.Logf("window opened %s on %s's clock (%s ahead); it started its reboot %s after on that clock, %s before the real opening", opening.Format(time.RFC3339), waiting.Name(), ahead, at.Sub(opening), opening.Sub(seen).Round(time.Second))
}
