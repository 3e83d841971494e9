package rollout_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // the windows name their zone, as the binaries do

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// The windows of these tests are seconds long and computed from now, in a
// zone of their own (Asia/Shanghai, not the machine's): the rollout waits
// for them itself, and the tests wait for what it does, never for time.
const windowZone = "Asia/Shanghai"

// testWindow is a maintenance window from start for d, in windowZone, on
// whole seconds (as the values write it), and its bounds.
type testWindow struct {
	values     map[string]any
	start, end time.Time
}

func newTestWindow(t *testing.T, start time.Time, d time.Duration, inFlight string) testWindow {
	t.Helper()
	loc, err := time.LoadLocation(windowZone)
	if err != nil {
		t.Fatal(err)
	}
	s := start.In(loc).Truncate(time.Second)
	e := s.Add(d)
	return testWindow{start: s, end: e, values: map[string]any{
		"days":  []any{strings.ToLower(s.Weekday().String()[:3])},
		"start": s.Format("15:04:05"), "end": e.Format("15:04:05"), "timeZone": windowZone, "inFlight": inFlight,
	}}
}

// until is how the product writes the window's bound: on its own clock.
func (w testWindow) until(at time.Time) string {
	loc, _ := time.LoadLocation(windowZone)
	return at.In(loc).Format(time.RFC3339)
}

func (w testWindow) contains(t time.Time) bool { return !t.Before(w.start) && t.Before(w.end) }

// admissions are the times the rollout admitted each node: its
// NPUDriverUpgrade event leaving upgrade-required for cordon-required,
// stamped by the rollout (this machine's clock) in whole seconds, so a
// time inside a window whose bounds are whole seconds is inside it.
func admissions(ctx context.Context, t *testing.T, node string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, e := range events(ctx, t, node, contract.EventNPUDriverUpgrade, 1) {
		if strings.HasPrefix(e.Message, "upgrade-required → cordon-required") {
			out = append(out, eventTime(e))
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s was never admitted", node)
	}
	return out
}

// firstSeen records, per fleet node, the first value of what it watches
// and when (on the test's clock) the node first showed one.
type firstSeen struct {
	mu  sync.Mutex
	at  map[string]time.Time
	val map[string]string
}

// watchFirst records, for each fleet node, the first non-empty of(node)
// and when it was seen.
func (f *fleet) watchFirst(of func(*corev1.Node) string) *firstSeen {
	fs := &firstSeen{at: map[string]time.Time{}, val: map[string]string{}}
	stop := make(chan struct{})
	f.t.Cleanup(func() { close(stop) })
	reflectNodes(f.t, f.selector(), stop, func(nodes []*corev1.Node) {
		now := time.Now()
		fs.mu.Lock()
		defer fs.mu.Unlock()
		for _, n := range nodes {
			if _, seen := fs.at[n.Name]; !seen {
				if v := of(n); v != "" {
					fs.at[n.Name], fs.val[n.Name] = now, v
				}
			}
		}
	})
	return fs
}

// watchFirstCordons records when each fleet node was first seen cordoned.
func (f *fleet) watchFirstCordons() *firstSeen {
	return f.watchFirst(func(n *corev1.Node) string {
		if n.Spec.Unschedulable {
			return "cordoned"
		}
		return ""
	})
}

// get is when each node was first seen with a value.
func (fs *firstSeen) get() map[string]time.Time {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := map[string]time.Time{}
	for k, v := range fs.at {
		out[k] = v
	}
	return out
}

// value is the first value seen on node.
func (fs *firstSeen) value(node string) string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.val[node]
}

// windowStatus runs `npu-hooks status` (table) with the rollout's
// selectors and windows, as an operator would, and returns its output.
func windowStatus(ctx context.Context, t *testing.T, args []string) string {
	t.Helper()
	out := []string{"status"}
	for _, a := range args {
		for _, p := range []string{"--namespace=", "--label-domain=", "--npu-node-selector=", "--driver-selector=", "--auto-upgrade=", "--maintenance-window="} {
			if strings.HasPrefix(a, p) {
				out = append(out, a)
			}
		}
	}
	r := hooks(ctx, t, out...)
	if r.code != 0 {
		t.Fatalf("status: %s", r)
	}
	return r.stdout
}

// An automatic upgrade started outside its window cordons nothing until
// the window opens, and then finishes inside it. A run whose deadline
// comes before the opening (the resume CronJob's, or a short hook Job)
// ends at once, "waiting for window", exit 0, as no failure.
func TestUpgradeStartedOutsideItsWindowWaitsForIt(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2, nil)
	ctx := ctxTimeout(t, 12*time.Minute)
	cordons := f.watchFirstCordons()
	w := newTestWindow(t, time.Now().Add(45*time.Second), 15*time.Minute, "finish")
	f.policy["maintenanceWindows"] = []any{w.values}
	args := f.upgrade(ctx, newVersion)
	names := f.names()

	// A run that cannot live to the opening says so and leaves.
	early := hooks(ctx, t, append(append([]string{}, args...), "--lease-identity=early-"+f.ns, "--deadline=15s")...)
	wantLine := "maintenance window: closed until " + w.until(w.start)
	if early.code != 0 || !strings.Contains(early.stdout, "rollout waiting for window: "+wantLine) ||
		!strings.Contains(early.stdout, "waiting for it: "+strings.Join(names, ", ")) {
		t.Fatalf("a run ending before the opening: want exit 0 and \"rollout waiting for window: %s ...\", got %s", wantLine, early)
	}
	if time.Now().After(w.start) {
		t.Fatalf("the setup outlived the window's opening at %s: nothing left to test", w.start)
	}

	r := f.startRollout(args)
	// Before the opening, status names the window and who waits for it,
	// and the next node in line is told until when.
	st := windowStatus(ctx, t, args)
	if time.Now().Before(w.start) {
		if !strings.Contains(st, wantLine) || !strings.Contains(st, "waiting for it: "+strings.Join(names, ", ")) || !strings.Contains(st, "(waiting-for-window)") {
			t.Errorf("status before the opening lacks the window line %q ...:\n%s", wantLine, st)
		}
	}
	testbed.WaitNodeEvent(ctx, t, env.Client, names[0], string(contract.EventMaintenanceWindowClosed),
		"node "+names[0]+": its driver upgrade ("+oldVersion+" → "+newVersion+") waits for the maintenance window: closed until "+w.until(w.start))

	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d:\n%s", code, tail(r.output(), 30))
	}
	done := time.Now()
	f.checkDone(ctx)
	for _, n := range names {
		for _, at := range admissions(ctx, t, n) {
			if !w.contains(at) {
				t.Errorf("%s admitted at %s, outside the window %s-%s", n, at.Format(time.RFC3339), w.start.Format(time.RFC3339), w.end.Format(time.RFC3339))
			}
		}
		if c := cordons.get()[n]; c.Before(w.start) {
			t.Errorf("%s cordoned at %s, before the window opened at %s", n, c.Format(time.RFC3339Nano), w.start.Format(time.RFC3339))
		}
	}
	if !w.contains(done) {
		t.Errorf("rollout finished at %s, outside the window %s-%s", done, w.start, w.end)
	}
	if !strings.Contains(r.output(), "rollout finished:") {
		t.Errorf("no summary:\n%s", tail(r.output(), 10))
	}
	var firsts []string
	for _, n := range names {
		firsts = append(firsts, fmt.Sprintf("%s +%s", n, cordons.get()[n].Sub(w.start).Round(time.Millisecond)))
	}
	t.Logf("window opened %s; first cordons after it: %s; rollout finished %s after the opening", w.start.Format(time.RFC3339), strings.Join(firsts, ", "), done.Sub(w.start).Round(time.Second))
}

// A window closing mid-rollout stops new admissions, and a node in
// flight under inFlight: wait goes on up to its reboot and holds it,
// cordoned and drained, until the next window opens; status says so.
//
// Node 1 is admitted in the first window and kept waiting for a job pod
// (waitForCompletion, 40 s) past its close; node 2, skipped at first,
// becomes upgradable in the gap and must wait for the second window.
//
// The nodes' clocks are skewed, and the upgrade windows are the
// rollout's alone to judge, on its clock: node 1's clock runs 5 minutes
// ahead, inside the second window all through the gap, so a rebooter
// judging by it would reboot in the gap; node 2's runs 10 minutes
// behind, before the second window for its first 10 minutes, so one
// judging by it would hold node 2's reboot that long.
func TestWindowClosingMidRolloutHoldsTheReboot(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2, func(p, _ map[string]any) {
		p["maxParallelUpgrades"] = 2
		p["maxUnavailable"] = "100%"
		p["waitForCompletion"] = map[string]any{"podSelector": "app=train", "timeoutSeconds": 40}
	})
	ctx := ctxTimeout(t, 16*time.Minute)
	n1, n2 := f.nodes[0].Name(), f.nodes[1].Name()
	offsets := map[string]time.Duration{n1: 5 * time.Minute, n2: -10 * time.Minute}
	for _, pn := range f.nodes {
		if err := pn.Host().SetClockOffset(offsets[pn.Name()]); err != nil {
			t.Fatal(err)
		}
	}
	// The rebooter stamps reboot-started-at on its node's clock as it
	// starts the reboot; less the node's offset, that is the real time.
	// (Its Rebooting event may die with the simulated reboot, which kills
	// the process before the event is written.)
	starts := f.watchFirst(func(n *corev1.Node) string { return n.Annotations[keys.RebootStartedAt()] })
	rebootAt := func(node string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, starts.value(node))
		if err != nil {
			t.Fatalf("%s: no reboot-started-at seen (%v)", node, err)
		}
		return v.Add(-offsets[node])
	}
	patchNode(ctx, t, n2, fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, keys.UpgradeSkip()))
	if _, err := env.Client.CoreV1().Pods(f.ns).Create(ctx, barePod(f.ns, "train", n1, nil, map[string]string{"app": "train"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The first window opens a minute from now: the helm upgrade below
	// comes first, seconds on a quiet machine but over 20 s at a load of
	// 15 on 2 cores, and a window that opened during it tests nothing.
	first := newTestWindow(t, time.Now().Add(60*time.Second), 20*time.Second, "wait")
	second := newTestWindow(t, first.start.Add(100*time.Second), 15*time.Minute, "wait")
	f.policy["maintenanceWindows"] = []any{first.values, second.values}
	args := f.upgrade(ctx, newVersion)
	if time.Now().After(first.start) {
		t.Fatalf("the setup outlived the first window's opening at %s", first.start)
	}
	r := f.startRollout(args)

	// Node 1's reboot is held past the close: requested (its driver pod
	// installs the new version meanwhile) but not started.
	var heldAt time.Time
	waitNode(ctx, t, n1, "reboot held for the window", func(n *corev1.Node) bool {
		heldAt = time.Now()
		return n.Annotations[keys.RebootHold()] == contract.HoldMaintenanceWindow && n.Labels[keys.RebootRequired()] == contract.True
	})
	if first.contains(heldAt) || !heldAt.Before(second.start) {
		t.Fatalf("hold seen at %s: want it between the windows (%s, %s)", heldAt, first.end, second.start)
	}
	testbed.WaitNodeEvent(ctx, t, env.Client, n1, string(contract.EventMaintenanceWindowClosed),
		"node "+n1+": its upgrade reboot waits for the maintenance window (inFlight: wait), the node cordoned and drained: closed until "+second.until(second.start))
	// Node 2 becomes upgradable in the gap: the closed window alone keeps
	// it out, and it is told until when.
	patchNode(ctx, t, n2, fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, keys.UpgradeSkip()))
	testbed.WaitNodeEvent(ctx, t, env.Client, n2, string(contract.EventMaintenanceWindowClosed),
		"node "+n2+": its driver upgrade ("+oldVersion+" → "+newVersion+") waits for the maintenance window: closed until "+second.until(second.start))
	st := windowStatus(ctx, t, args)
	if time.Now().Before(second.start) {
		want := "maintenance window: closed until " + second.until(second.start)
		if !strings.Contains(st, want) || !strings.Contains(st, "waiting for it: "+n1+", "+n2) {
			t.Errorf("status in the gap lacks %q and the waiting nodes:\n%s", want, st)
		}
		if !strings.Contains(st, "reboot waits for the maintenance window (inFlight: wait), cordoned and drained") {
			t.Errorf("status in the gap does not say why %s waits:\n%s", n1, st)
		}
	}

	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d:\n%s", code, tail(r.output(), 30))
	}
	f.checkDone(ctx)
	// Node 1 rebooted only once the second window opened, and node 2 as
	// soon as its turn came in it, not once its own clock got there.
	r1, r2 := rebootAt(n1), rebootAt(n2)
	if r1.Before(second.start) {
		t.Errorf("%s (clock %s ahead) rebooted at %s, before the second window opened at %s", n1, offsets[n1], r1, second.start)
	}
	if !r2.Before(second.start.Add(-offsets[n2])) {
		t.Errorf("%s (clock %s behind) rebooted at %s, only once its own clock reached the second window (%s): the rebooter judged the window", n2, -offsets[n2], r2, second.start)
	}
	if a := admissions(ctx, t, n1); !first.contains(a[0]) {
		t.Errorf("%s admitted at %s, outside the first window", n1, a[0])
	}
	for _, at := range admissions(ctx, t, n2) {
		if !second.contains(at) {
			t.Errorf("%s admitted at %s, outside the second window %s-%s", n2, at, second.start, second.end)
		}
	}
	utc := func(t time.Time) string { return t.UTC().Format(time.TimeOnly) }
	t.Logf("first window %s-%s UTC, second opened %s; %s held from %s, rebooted %s; %s rebooted %s", utc(first.start), utc(first.end),
		utc(second.start), n1, utc(heldAt), utc(r1), n2, utc(r2))
}
