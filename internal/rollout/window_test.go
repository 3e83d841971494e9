package rollout

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/window"
)

// now (decide_test.go) is Sunday 2026-11-22 12:00 UTC.
const (
	closedSpec     = "sun 13:00-14:00 Asia/Shanghai" // closed: it is 20:00 in Shanghai
	openTill13UTC  = "sun 11:00-13:00 UTC"
	closedWaitSpec = "sun 10:00-11:00 UTC wait" // closed since 11:00, holds reboots
	closedFinSpec  = "sun 10:00-11:00 UTC"      // closed since 11:00, lets them finish
)

func windows(t *testing.T, specs ...string) func(*Policy) {
	t.Helper()
	s, err := window.ParseAll(specs)
	if err != nil {
		t.Fatal(err)
	}
	return func(p *Policy) { p.Windows, p.AutoUpgrade = s, true }
}

func queued(n *NodeView)     { in(contract.StateUpgradeRequired)(n) }
func heldForWin(n *NodeView) { n.RebootHold = contract.HoldMaintenanceWindow }

func TestNoAdmissionOutsideTheWindow(t *testing.T) {
	p := policy(windows(t, "sun 13:00-15:00 UTC"), func(p *Policy) { p.MaxUnavailable = intstr.FromString("100%") })
	d := decide(p, nv("a", queued), nv("b", queued))
	want(t, d)
	if d.Outcome != WaitingForWindow {
		t.Fatalf("outcome = %s, want %s", d.Outcome, WaitingForWindow)
	}
	for _, n := range []string{"a", "b"} {
		if !strings.Contains(d.Waiting[n], "waiting for the maintenance window: closed until 2026-11-22T13:00:00Z (in 1h0m0s, window sun 13:00-15:00 UTC)") {
			t.Errorf("%s waits for %q", n, d.Waiting[n])
		}
	}
	if d.Requeue != time.Hour {
		t.Errorf("requeue = %s, want the hour to the opening", d.Requeue)
	}
	if d.Window == nil || d.Window.Open || !d.Window.Next.Equal(now.Add(time.Hour)) || strings.Join(d.Window.Waiting, ",") != "a,b" {
		t.Fatalf("window status %+v", d.Window)
	}
	// maxParallelUpgrades 1: only the next in line is told, not the queue.
	if len(d.Announce) != 1 || d.Announce[0].Node != "a" || !strings.Contains(d.Announce[0].Message, "node a: its driver upgrade (1.0 → 2.0) waits for the maintenance window: closed until 2026-11-22T13:00:00Z (in 1h0m0s") {
		t.Fatalf("announce = %+v", d.Announce)
	}
	// Inside the window it admits as before, and wakes up at the close.
	d = decide(policy(windows(t, openTill13UTC)), nv("a", queued), nv("b", queued))
	want(t, d, "a:upgrade-required>cordon-required")
	if d.Requeue != time.Hour || !d.Window.Open {
		t.Errorf("open window: requeue %s, status %+v", d.Requeue, d.Window)
	}
}

// An approval is the operator speaking for that node: it is admitted
// outside the window (still within the budgets), the others wait.
func TestApprovalBypassesTheWindow(t *testing.T) {
	p := policy(windows(t, closedSpec))
	d := decide(p, nv("a", queued), nv("b", queued, approved))
	want(t, d, "b:upgrade-required>cordon-required")
	if !strings.Contains(d.Waiting["a"], "waiting for the maintenance window") {
		t.Fatalf("a: %q", d.Waiting["a"])
	}
}

// The window that closed last says what a node in flight does. wait:
// the node is drained as usual and its reboot requested (so its driver
// pod installs the new version), held for the window; finish: the
// reboot goes ahead, late.
func TestInFlightAtTheClose(t *testing.T) {
	drained := func(n *NodeView) { in(contract.StateDrainRequired)(n); n.Unschedulable = true }
	d := decide(policy(windows(t, closedWaitSpec)), nv("a", drained))
	want(t, d, "a:drain-required>reboot-required")
	a := d.Actions[0]
	if v := a.Change.Annotations[keys.RebootHold()]; v == nil || *v != contract.HoldMaintenanceWindow {
		t.Fatalf("hold = %v, want %s", v, contract.HoldMaintenanceWindow)
	}
	if v := a.Change.Labels[keys.RebootRequired()]; v == nil || *v != contract.True {
		t.Fatal("the request is made all the same, for the driver pod's install")
	}
	if !hasEvent(a, contract.EventRebootRequired) || !hasEvent(a, contract.EventMaintenanceWindowClosed) {
		t.Fatalf("events %+v", a.Events)
	}
	d = decide(policy(windows(t, closedFinSpec)), nv("a", drained))
	want(t, d, "a:drain-required>reboot-required")
	if _, ok := d.Actions[0].Change.Annotations[keys.RebootHold()]; ok {
		t.Fatal("inFlight finish: no hold")
	}

	// A reboot requested before the close and not started is heldForWin, and
	// the rollout waits for the window, not a failure.
	wp := policy(windows(t, closedWaitSpec))
	d = decide(wp, nv("a", rebooting))
	want(t, d, "a:reboot-required>reboot-required")
	if v := d.Actions[0].Change.Annotations[keys.RebootHold()]; v == nil || !hasEvent(d.Actions[0], contract.EventMaintenanceWindowClosed) {
		t.Fatalf("hold not set: %+v", d.Actions[0])
	}
	d = decide(wp, nv("a", rebooting, heldForWin), nv("b", queued))
	want(t, d)
	if d.Outcome != WaitingForWindow || !strings.Contains(d.Waiting["a"], "reboot waits for the maintenance window (inFlight: wait), cordoned and drained") {
		t.Fatalf("held: %s %q", d.Outcome, d.Waiting["a"])
	}
	if strings.Join(d.Window.Waiting, ",") != "a,b" {
		t.Fatalf("waiting for the window: %v", d.Window.Waiting)
	}
	// Started already: it reboots, whatever the window.
	want(t, decide(wp, nv("a", rebooting, func(n *NodeView) { n.RebootFrom = n.UpgradeBootID })))
	// Approved: the hold goes, the rebooter reboots.
	d = decide(wp, nv("a", rebooting, heldForWin, approved))
	want(t, d, "a:reboot-required>reboot-required")
	if v, ok := d.Actions[0].Change.Annotations[keys.RebootHold()]; !ok || v != nil {
		t.Fatal("an approval lifts the hold")
	}
	// A recovery reboot serving the upgrade is the rebooter's to judge.
	want(t, decide(wp, nv("a", rebooting, func(n *NodeView) { n.RebootReason = "recovery" })))
	// Open again: the hold is lifted; the reboot and validation follow.
	d = decide(policy(windows(t, openTill13UTC)), nv("a", rebooting, heldForWin))
	want(t, d, "a:reboot-required>reboot-required")
	if v, ok := d.Actions[0].Change.Annotations[keys.RebootHold()]; !ok || v != nil {
		t.Fatal("the opening lifts the hold")
	}
	d = decide(wp, nv("a", rebooting, heldForWin, func(n *NodeView) { n.BootID = "boot-b" }))
	want(t, d, "a:reboot-required>validation-required")
	if v, ok := d.Actions[0].Change.Annotations[keys.RebootHold()]; !ok || v != nil {
		t.Fatal("the hold goes with the reboot")
	}
	// Manual mode: the approval it needs anyway lets it through.
	d = decide(policy(windows(t, closedWaitSpec), func(p *Policy) { p.AutoUpgrade = false }), nv("a", rebooting, heldForWin))
	if !strings.Contains(d.Waiting["a"], "waiting for approval: kubectl annotate node a npu.openfuyao.com/approve-reboot=true (the maintenance window is closed") {
		t.Fatalf("manual: %q", d.Waiting["a"])
	}
}

// The window closing stops admissions; in-flight nodes (finish) go on.
func TestCloseStopsAdmissionsOnly(t *testing.T) {
	p := policy(windows(t, closedFinSpec), func(p *Policy) { p.MaxParallel = 2; p.MaxUnavailable = intstr.FromString("100%") })
	d := decide(p, nv("a", in(contract.StateCordonRequired)), nv("b", queued))
	want(t, d, "a:cordon-required>wait-for-jobs-required")
	if d.Outcome != Running {
		t.Fatalf("outcome %s: a node in flight keeps the rollout running", d.Outcome)
	}
}

func hasEvent(a Action, r contract.EventReason) bool {
	for _, e := range a.Events {
		if e.Reason == r {
			return true
		}
	}
	return false
}

func TestSettlingDelay(t *testing.T) {
	p := policy(func(p *Policy) { p.Settle = 5 * time.Minute })
	s := Snapshot{Nodes: []NodeView{nv("a", loaded("2.0"), readyDriver), nv("b", queued)}, Returned: Return{Node: "a", At: now.Add(-time.Minute)}}
	d := Decide(s, p, keys, now)
	want(t, d)
	if d.Requeue != 4*time.Minute || !strings.Contains(d.Waiting["b"], "settling: the next node starts 5m0s after node a came back (settleSeconds), 4m0s left") {
		t.Fatalf("requeue %s, b waits %q", d.Requeue, d.Waiting["b"])
	}
	s.Returned.At = now.Add(-5 * time.Minute)
	want(t, Decide(s, p, keys, now), "b:upgrade-required>cordon-required")
	// A run that starts part-way through counts from its own start.
	s.Returned = Return{}
	s.ObservedSince = now.Add(-2 * time.Minute)
	d = Decide(s, p, keys, now)
	want(t, d)
	if !strings.Contains(d.Waiting["b"], "this rollout run started") {
		t.Fatalf("b waits %q", d.Waiting["b"])
	}
	// A fresh rollout (nothing done yet) starts at once.
	s.Nodes[0] = nv("a", queued)
	want(t, Decide(s, p, keys, now), "a:upgrade-required>cordon-required")
}

func TestPlanAndStatusShowTheWindow(t *testing.T) {
	p := policy(windows(t, "sat,sun 22:00-04:00 Europe/Berlin wait"))
	got := Plan(Snapshot{Nodes: []NodeView{nv("a"), nv("b")}}, p, now)
	for _, e := range got {
		if !strings.HasPrefix(e.Note, "queued; waits for the maintenance window: closed until 2026-11-22T22:00:00+01:00") {
			t.Errorf("plan note of %s: %q", e.Node, e.Note)
		}
	}
	d := decide(p, nv("a", queued), nv("b", queued))
	st := BuildStatus(Snapshot{Nodes: []NodeView{nv("a", queued), nv("b", queued)}}, d, now)
	wantLine := "maintenance window: closed until 2026-11-22T22:00:00+01:00 (in 9h0m0s, window sat,sun 22:00-04:00 Europe/Berlin wait); waiting for it: a, b"
	if st.Window == nil || st.Window.Line() != wantLine {
		t.Fatalf("status window line:\n%v\nwant\n%s", st.Window, wantLine)
	}
}

// The rollout's wake-ups and notes across a DST change in the window's
// zone are real durations: Berlin's clocks jump from 02:00 to 03:00 on
// Sunday 2026-03-29 and go back from 03:00 to 02:00 on 2026-10-25.
func TestWindowAcrossDSTChanges(t *testing.T) {
	p := policy(windows(t, "sun 01:30-05:00 Europe/Berlin"))
	at := func(utc string) time.Time {
		v, err := time.Parse(time.RFC3339, utc)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		name    string
		now     time.Time
		moves   []string
		requeue time.Duration
		note    string
	}{
		// Saturday 23:00 CET: the opening, 01:30 CET, is 2h30m away.
		{name: "closed before spring forward", now: at("2026-03-28T22:00:00Z"), requeue: 2*time.Hour + 30*time.Minute,
			note: "closed until 2026-03-29T01:30:00+01:00 (in 2h30m0s"},
		// 01:45 CET: open until 05:00 CEST, 02:15 later, not 03:15 by the wall.
		{name: "open across the jump", now: at("2026-03-29T00:45:00Z"), requeue: 2*time.Hour + 15*time.Minute,
			moves: []string{"a:upgrade-required>cordon-required"}},
		// Saturday 23:00 CEST: the opening, 01:30 CEST, is 2h30m away.
		{name: "closed before fall back", now: at("2026-10-24T21:00:00Z"), requeue: 2*time.Hour + 30*time.Minute,
			note: "closed until 2026-10-25T01:30:00+02:00 (in 2h30m0s"},
		// The second 02:30 (CET): open until 05:00 CET, 2h30m later.
		{name: "open in the repeated hour", now: at("2026-10-25T01:30:00Z"), requeue: 2*time.Hour + 30*time.Minute,
			moves: []string{"a:upgrade-required>cordon-required"}},
		// 05:00 CET has passed: next Sunday, 01:30 CET, is 6d20h30m away.
		{name: "closed after fall back", now: at("2026-10-25T04:00:00Z"), requeue: 6*24*time.Hour + 20*time.Hour + 30*time.Minute,
			note: "closed until 2026-11-01T01:30:00+01:00"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(Snapshot{Nodes: []NodeView{nv("a", queued)}, Targets: []string{"ns/dp"}}, p, keys, tc.now)
			want(t, d, tc.moves...)
			if d.Requeue != tc.requeue {
				t.Errorf("requeue %s, want %s", d.Requeue, tc.requeue)
			}
			if !strings.Contains(d.Waiting["a"], tc.note) {
				t.Errorf("a waits %q, want %q", d.Waiting["a"], tc.note)
			}
		})
	}
}
