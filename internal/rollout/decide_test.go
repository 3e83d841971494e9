package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/openfuyao/npu-stack/internal/contract"
)

var (
	keys = contract.Keys{Domain: contract.DefaultDomain}
	now  = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
)

// nv is a ready, schedulable, up-to-date node on driver 1.0 → 2.0 unless
// changed by opts.
func nv(name string, opts ...func(*NodeView)) NodeView {
	n := NodeView{Name: name, ResourceVersion: "7", StateKnown: true, Ready: true, BootID: "boot-a",
		Profile: "npu-operator/drv", Desired: "2.0", Loaded: "1.0", Since: now.Add(-time.Minute), StateSeen: now.Add(-time.Minute),
		TargetPods: map[string][]TargetPod{}, Rerolled: map[string]string{}}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func in(s contract.UpgradeState) func(*NodeView) {
	return func(n *NodeView) { n.State = s; n.RawState = string(s) }
}
func loaded(v string) func(*NodeView)    { return func(n *NodeView) { n.Loaded = v } }
func cordoned(n *NodeView)               { n.Unschedulable = true }
func notReady(n *NodeView)               { n.Ready = false }
func skip(n *NodeView)                   { n.Skip = true }
func canary(n *NodeView)                 { n.Canary = true }
func wasCordoned(v bool) func(*NodeView) { return func(n *NodeView) { n.WasCordoned = &v } }

func policy(opts ...func(*Policy)) Policy {
	p := Policy{MaxParallel: 1, MaxUnavailable: intstr.FromString("25%"), MaxFailures: 1, RebootTimeout: 30 * time.Minute}
	for _, o := range opts {
		o(&p)
	}
	return p
}

func decide(p Policy, nodes ...NodeView) Decision {
	return Decide(Snapshot{Nodes: nodes, Targets: []string{"ns/dp"}}, p, keys, now)
}

// moves summarises the transitions as "node:from>to".
func moves(d Decision) []string {
	var out []string
	for _, a := range d.Actions {
		switch a.Kind {
		case ActTransition:
			out = append(out, fmt.Sprintf("%s:%s>%s", a.Node, sn(a.From), sn(a.To)))
		case ActEvict:
			out = append(out, fmt.Sprintf("%s:evict-%s>%s", a.Node, a.Evict, sn(a.Then.To)))
		case ActDeletePods:
			out = append(out, fmt.Sprintf("%s:delete-%d", a.Node, len(a.Pods)))
		}
	}
	return out
}

func want(t *testing.T, d Decision, exp ...string) {
	t.Helper()
	got := moves(d)
	if strings.Join(got, " ") != strings.Join(exp, " ") {
		t.Fatalf("actions = %q, want %q (waiting %v)", got, exp, d.Waiting)
	}
}

func TestResolveMaxUnavailableRoundsUp(t *testing.T) {
	for _, tc := range []struct {
		v     intstr.IntOrString
		total int
		want  int
	}{
		{intstr.FromString("25%"), 12, 3},
		{intstr.FromString("25%"), 10, 3}, // 2.5 → 3
		{intstr.FromString("1%"), 5, 1},   // never rounds to 0 when > 0%
		{intstr.FromString("0%"), 5, 0},
		{intstr.FromString("100%"), 7, 7},
		{intstr.FromInt32(2), 12, 2},
		{intstr.FromInt32(20), 12, 12}, // capped at the fleet
	} {
		got, err := ResolveMaxUnavailable(tc.v, tc.total)
		if err != nil || got != tc.want {
			t.Errorf("ResolveMaxUnavailable(%s, %d) = %d, %v; want %d", tc.v.String(), tc.total, got, err, tc.want)
		}
	}
	if _, err := ResolveMaxUnavailable(intstr.FromString("lots"), 3); err == nil {
		t.Error("a non-percentage string must be rejected")
	}
	if _, err := ResolveMaxUnavailable(intstr.FromInt32(-1), 3); err == nil {
		t.Error("a negative count must be rejected")
	}
}

func TestIdleNodes(t *testing.T) {
	p := policy()
	want(t, decide(p, nv("a")), "a:done>upgrade-required")
	want(t, decide(p, nv("a", loaded("2.0"))))                                       // up to date
	want(t, decide(p, nv("a", loaded(""))))                                          // version not reported: no guess
	want(t, decide(p, nv("a", skip)))                                                // skip label
	want(t, decide(p, nv("a", func(n *NodeView) { n.ProfileError = "no profile" }))) // not covered
	d := decide(p, nv("a", skip), nv("b", loaded("2.0"), readyDriver))
	if d.Outcome != Finished || d.Progress.Skipped != 1 || d.Progress.Done != 1 {
		t.Fatalf("skipped + done = %s %+v, want finished (%v)", d.Outcome, d.Progress, d.Waiting)
	}
	if d := decide(p, nv("a", loaded(""))); d.Outcome != Running {
		t.Fatalf("unknown version must keep the rollout waiting, got %s", d.Outcome)
	}
	if d := decide(p, nv("a", loaded("2.0")), nv("b", loaded("2.0"), func(n *NodeView) { n.ProfileError = "x" })); d.Outcome != Stuck {
		t.Fatalf("an uncovered node must end the rollout as stuck, got %s", d.Outcome)
	}
}

func TestStateMachineSteps(t *testing.T) {
	p := policy()
	want(t, decide(p, nv("a", in(contract.StateUpgradeRequired))), "a:upgrade-required>cordon-required")
	d := decide(p, nv("a", in(contract.StateCordonRequired)))
	want(t, d, "a:cordon-required>wait-for-jobs-required")
	if u := d.Actions[0].Change.Unschedulable; u == nil || !*u {
		t.Fatal("cordon step must cordon")
	}
	want(t, decide(p, nv("a", in(contract.StateWaitForJobsRequired))), "a:wait-for-jobs-required>pod-deletion-required")
	want(t, decide(p, nv("a", in(contract.StatePodDeletionRequired))), "a:pod-deletion-required>drain-required")
	want(t, decide(p, nv("a", in(contract.StatePodDeletionRequired), func(n *NodeView) { n.NPUPods = 2 })), "a:evict-npu-pods>drain-required")
	d = decide(p, nv("a", in(contract.StateDrainRequired)))
	want(t, d, "a:drain-required>reboot-required")
	ch := d.Actions[0].Change
	if v := ch.Labels[keys.RebootRequired()]; v == nil || *v != "true" {
		t.Fatal("entering reboot-required must set the reboot-required label")
	}
	if v := ch.Annotations[keys.RebootReason()]; v == nil || *v != "upgrade" {
		t.Fatal("reboot reason must be upgrade")
	}
	if v := ch.Annotations[keys.UpgradeBootID()]; v == nil || *v != "boot-a" {
		t.Fatal("the boot ID before the reboot must be recorded")
	}
	if len(d.Actions[0].Events) != 1 || d.Actions[0].Events[0].Reason != contract.EventRebootRequired || !strings.Contains(d.Actions[0].Events[0].Message, "reason=upgrade") {
		t.Fatalf("want a RebootRequired event with reason=upgrade, got %+v", d.Actions[0].Events)
	}
	want(t, decide(policy(func(p *Policy) { p.Drain.Enable = true }), nv("a", in(contract.StateDrainRequired))), "a:evict-drain>reboot-required")
}

func TestWaitForCompletion(t *testing.T) {
	sel := labels.SelectorFromSet(labels.Set{"job": "train"})
	forever := policy(func(p *Policy) { p.WaitForCompletion.Selector = sel })
	busy := func(n *NodeView) { n.WaitPods = 1 }
	want(t, decide(forever, nv("a", in(contract.StateWaitForJobsRequired), busy)))
	bounded := policy(func(p *Policy) { p.WaitForCompletion = WaitPolicy{Selector: sel, Timeout: 5 * time.Minute} })
	d := decide(bounded, nv("a", in(contract.StateWaitForJobsRequired), busy))
	want(t, d)
	if d.Requeue != 4*time.Minute {
		t.Fatalf("requeue = %s, want the 4m left of the timeout", d.Requeue)
	}
	want(t, decide(bounded, nv("a", in(contract.StateWaitForJobsRequired), busy, func(n *NodeView) { n.StateSeen = now.Add(-6 * time.Minute) })),
		"a:wait-for-jobs-required>pod-deletion-required")
}

func rebooting(n *NodeView) {
	n.State, n.RawState = contract.StateRebootRequired, string(contract.StateRebootRequired)
	n.UpgradeBootID, n.RebootRequired, n.RebootReason = "boot-a", true, "upgrade"
}

func TestRebootStep(t *testing.T) {
	p := policy()
	d := decide(p, nv("a", rebooting))
	want(t, d)
	if !strings.Contains(d.Waiting["a"], "approve-reboot=true") {
		t.Fatalf("manual mode must say how to approve, got %q", d.Waiting["a"])
	}
	auto := policy(func(p *Policy) { p.AutoUpgrade = true })
	if d := decide(auto, nv("a", rebooting)); !strings.Contains(d.Waiting["a"], "rebooter") {
		t.Fatalf("auto mode waits for the rebooter, got %q", d.Waiting["a"])
	}
	// A desired version changed while the node waits for its reboot: the
	// target follows, so the driver pod installs and the rebooter awaits
	// the new one; once the reboot started, the target stays.
	retargeted := func(n *NodeView) { n.Target = "25.3.0" }
	d = decide(auto, nv("a", rebooting, retargeted))
	want(t, d, "a:reboot-required>reboot-required")
	if got := d.Actions[0].Change.Annotations[keys.UpgradeTarget()]; got == nil || *got != nv("a").Desired {
		t.Fatalf("target = %v, want the desired %s", got, nv("a").Desired)
	}
	want(t, decide(auto, nv("a", rebooting, retargeted, func(n *NodeView) { n.RebootFrom = n.UpgradeBootID })))
	// The reboot timeout counts from the reboot, not from the approval wait.
	old := func(n *NodeView) { n.Since, n.StateSeen = now.Add(-2*time.Hour), now.Add(-2*time.Hour) }
	want(t, decide(p, nv("a", rebooting, old)))
	// seen: the rollout first saw the reboot of boot-a started ago, on
	// its own clock; the node's clock (reboot-started-at) is off by skew.
	started := func(ago, skew time.Duration) func(*NodeView) {
		return func(n *NodeView) {
			n.RebootFrom, n.RebootSeen, n.RebootStarted = "boot-a", now.Add(-ago), now.Add(-ago+skew)
		}
	}
	for _, skew := range []time.Duration{0, -10 * time.Minute, 10 * time.Minute, -3 * time.Hour, 3 * time.Hour} {
		d = decide(p, nv("a", rebooting, old, started(10*time.Minute, skew)))
		want(t, d)
		if d.Requeue != 20*time.Minute || d.Waiting["a"] != "rebooting" {
			t.Fatalf("skew %s: requeue = %s, waiting %q; want rebooting, the 20m left", skew, d.Requeue, d.Waiting["a"])
		}
		d = decide(p, nv("a", rebooting, old, started(31*time.Minute, skew)))
		want(t, d, "a:reboot-required>upgrade-failed")
	}
	// A reboot never observed before (a one-off decision, a restarted
	// rollout) counts from now: the whole timeout is left.
	d = decide(p, nv("a", rebooting, old, started(0, time.Hour), func(n *NodeView) { n.RebootSeen = time.Time{} }))
	if want(t, d); d.Requeue != 30*time.Minute {
		t.Fatalf("requeue = %s, want the whole 30m", d.Requeue)
	}
	d = decide(p, nv("a", rebooting, old, started(31*time.Minute, 0)))
	if s := *d.Actions[0].Change.Annotations[keys.UpgradeFailureStep()]; s != StepReboot {
		t.Fatalf("failure step = %s", s)
	}
	if d.Actions[0].Change.Unschedulable != nil {
		t.Fatal("a node lost in its reboot must stay cordoned")
	}
	// A reboot recorded from another boot belongs to an earlier reboot.
	d = decide(p, nv("a", rebooting, started(2*time.Hour, 0), func(n *NodeView) { n.RebootFrom = "boot-0" }))
	if want(t, d); !strings.Contains(d.Waiting["a"], "approve-reboot") {
		t.Fatalf("an earlier reboot is not this one: waiting %q", d.Waiting["a"])
	}
	// Boot ID changed: rebooted.
	d = decide(p, nv("a", rebooting, func(n *NodeView) { n.BootID = "boot-b" }))
	want(t, d, "a:reboot-required>validation-required")
	if v, ok := d.Actions[0].Change.Labels[keys.RebootRequired()]; !ok || v != nil {
		t.Fatal("after the reboot the rollout clears its reboot request (no second reboot)")
	}
	// Label removed by someone before the reboot: asked again.
	want(t, decide(p, nv("a", rebooting, func(n *NodeView) { n.RebootRequired = false })), "a:reboot-required>reboot-required")
	// Rolled back before the reboot: no reboot, uncordon.
	d = decide(p, nv("a", rebooting, loaded("2.0")))
	want(t, d, "a:reboot-required>uncordon-required")
}

func validating(n *NodeView) {
	n.State, n.RawState = contract.StateValidationRequired, string(contract.StateValidationRequired)
	n.Loaded, n.DriverReady = "2.0", true
	n.Driver = &DriverPod{Name: "drv-x", Version: "2.0", Ready: true, ReadyAt: now.Add(-30 * time.Second)}
}

func TestValidation(t *testing.T) {
	p := policy()
	oldPod := TargetPod{Target: "ns/dp", Namespace: "ns", Name: "dp-1", UID: "u1", Started: now.Add(-time.Hour), Ready: true}
	newPod := TargetPod{Target: "ns/dp", Namespace: "ns", Name: "dp-2", UID: "u2", Started: now.Add(-time.Second), Ready: true}
	with := func(pods ...TargetPod) func(*NodeView) {
		return func(n *NodeView) { n.TargetPods["ns/dp"] = pods }
	}
	for name, tc := range map[string]struct {
		opt  func(*NodeView)
		gap  string
		acts []string
	}{
		"old driver":         {func(n *NodeView) { n.Loaded = "1.0" }, "driver 1.0 loaded", nil},
		"no driver pod":      {func(n *NodeView) { n.Driver = nil }, "no driver pod", nil},
		"old driver pod":     {func(n *NodeView) { n.Driver.Version = "1.0" }, "of version 1.0", nil},
		"driver pod unready": {func(n *NodeView) { n.Driver.Ready = false }, "not Ready", nil},
		"health not ready":   {func(n *NodeView) { n.DriverReady = false }, "driver-ready=true", nil},
		"stale plugin":       {with(oldPod), "re-rolling", []string{"a:delete-1"}},
		"replacement coming": {func(n *NodeView) { n.Rerolled = map[string]string{"u1": "ns/dp"} }, "waiting for a new ns/dp pod", nil},
		"replacement unready": {func(n *NodeView) {
			n.Rerolled = map[string]string{"u1": "ns/dp"}
			n.TargetPods["ns/dp"] = []TargetPod{{Target: "ns/dp", UID: "u2", Started: now}}
		}, "waiting for a new ns/dp pod", nil},
		"deleted pod still there": {func(n *NodeView) {
			n.Rerolled = map[string]string{"u1": "ns/dp"}
			n.TargetPods["ns/dp"] = []TargetPod{oldPod}
		}, "re-rolling", []string{"a:delete-1"}},
		"valid":                       {with(newPod), "", []string{"a:validation-required>uncordon-required"}},
		"target not on this node":     {func(*NodeView) {}, "", []string{"a:validation-required>uncordon-required"}},
		"same second as driver ready": {with(TargetPod{Target: "ns/dp", UID: "u3", Started: now.Add(-30 * time.Second).Truncate(time.Second), Ready: true}), "", []string{"a:validation-required>uncordon-required"}},
	} {
		t.Run(name, func(t *testing.T) {
			d := decide(p, nv("a", validating, tc.opt))
			want(t, d, tc.acts...)
			if tc.gap != "" && !strings.Contains(d.Waiting["a"], tc.gap) {
				t.Fatalf("waiting = %q, want it to mention %q", d.Waiting["a"], tc.gap)
			}
		})
	}
	d := decide(p, nv("a", validating, with(oldPod)))
	if got := *d.Actions[0].Change.Annotations[keys.UpgradeRerolled()]; got != "u1=ns/dp" {
		t.Fatalf("re-rolled pods recorded as %q, want u1=ns/dp", got)
	}
	// since written by a rollout run on a machine whose clock is 31m
	// ahead of this one: the age is this process's own observation.
	skewed := func(n *NodeView) { n.Since = now.Add(-31 * time.Minute); n.DriverReady = false }
	if d = decide(p, nv("a", validating, skewed)); len(d.Actions) != 0 || d.Requeue != 29*time.Minute {
		t.Fatalf("since by another clock must not decide the timeout: %v, requeue %s", moves(d), d.Requeue)
	}
	late := func(n *NodeView) { n.StateSeen = now.Add(-31 * time.Minute); n.DriverReady = false }
	d = decide(p, nv("a", validating, late))
	want(t, d, "a:validation-required>upgrade-failed")
	if r := *d.Actions[0].Change.Annotations[keys.UpgradeFailureReason()]; !strings.Contains(r, "driver-ready") {
		t.Fatalf("failure reason %q must name the failed check", r)
	}
}

func TestUncordonKeepsPreCordonedNodes(t *testing.T) {
	p := policy()
	d := decide(p, nv("a", in(contract.StateUncordonRequired), cordoned, wasCordoned(false), loaded("2.0")))
	want(t, d, "a:uncordon-required>done")
	if u := d.Actions[0].Change.Unschedulable; u == nil || *u {
		t.Fatal("a node the rollout cordoned is uncordoned")
	}
	for _, k := range []string{keys.UpgradeState(), keys.UpgradeWasCordoned(), keys.UpgradeBootID(), keys.UpgradeSince()} {
		v, ok := d.Actions[0].Change.Labels[k]
		if !ok {
			v, ok = d.Actions[0].Change.Annotations[k]
		}
		if !ok || v != nil {
			t.Errorf("%s must be removed when done", k)
		}
	}
	d = decide(p, nv("a", in(contract.StateUncordonRequired), cordoned, wasCordoned(true), loaded("2.0")))
	if d.Actions[0].Change.Unschedulable != nil {
		t.Fatal("a node cordoned before the upgrade stays cordoned")
	}
}

func TestAdmissionBudgets(t *testing.T) {
	queued := func(name string, opts ...func(*NodeView)) NodeView {
		return nv(name, append([]func(*NodeView){in(contract.StateUpgradeRequired)}, opts...)...)
	}
	fleet := func(n int, opts ...func(*NodeView)) []NodeView {
		var out []NodeView
		for i := 0; i < n; i++ {
			out = append(out, queued(fmt.Sprintf("n%02d", i), opts...))
		}
		return out
	}
	admitted := func(d Decision) int {
		c := 0
		for _, a := range d.Actions {
			if a.To == contract.StateCordonRequired {
				c++
			}
		}
		return c
	}
	for name, tc := range map[string]struct {
		p     Policy
		nodes []NodeView
		want  int
	}{
		"parallel 3 of 12, 25%":   {policy(func(p *Policy) { p.MaxParallel = 3 }), fleet(12), 3},
		"parallel 1":              {policy(), fleet(12), 1},
		"unlimited parallel, 25%": {policy(func(p *Policy) { p.MaxParallel = 0 }), fleet(12), 3},
		"percent rounds up":       {policy(func(p *Policy) { p.MaxParallel = 0 }), fleet(10), 3},
		"int budget":              {policy(func(p *Policy) { p.MaxParallel = 0; p.MaxUnavailable = intstr.FromInt32(2) }), fleet(12), 2},
		"pre-cordoned counts": {policy(func(p *Policy) { p.MaxParallel = 3 }),
			append(fleet(11), nv("z-cordoned", loaded("2.0"), cordoned)), 2},
		"NotReady counts": {policy(func(p *Policy) { p.MaxParallel = 3 }),
			append(fleet(11), nv("z-down", loaded("2.0"), notReady)), 2},
		"in flight counts": {policy(func(p *Policy) { p.MaxParallel = 3 }),
			append(fleet(11), nv("a-busy", in(contract.StateDrainRequired))), 2},
		"cordoned candidate costs nothing": {policy(func(p *Policy) { p.MaxParallel = 0; p.MaxUnavailable = intstr.FromInt32(1) }),
			[]NodeView{queued("a", cordoned), queued("b"), queued("c")}, 1},
		"NotReady not started": {policy(func(p *Policy) { p.MaxParallel = 0 }), fleet(4, notReady), 0},
		"paused":               {policy(func(p *Policy) { p.Paused = true }), fleet(4), 0},
		"skip label":           {policy(func(p *Policy) { p.MaxParallel = 0 }), fleet(4, skip), 0},
		"failure budget spent": {policy(func(p *Policy) { p.MaxParallel = 0 }), append(fleet(4), nv("f", in(contract.StateFailed))), 0},
		"failure budget left": {policy(func(p *Policy) { p.MaxParallel = 0; p.MaxFailures = 2; p.MaxUnavailable = intstr.FromString("100%") }),
			append(fleet(4), nv("f", in(contract.StateFailed))), 4},
		"no failure limit": {policy(func(p *Policy) { p.MaxParallel = 1; p.MaxFailures = 0 }), append(fleet(4), nv("f", in(contract.StateFailed))), 1},
		"zero budget":      {policy(func(p *Policy) { p.MaxUnavailable = intstr.FromInt32(0) }), fleet(4), 0},
	} {
		t.Run(name, func(t *testing.T) {
			if got := admitted(decide(tc.p, tc.nodes...)); got != tc.want {
				t.Fatalf("admitted %d nodes, want %d", got, tc.want)
			}
		})
	}
}

func TestAdmissionRecordsCordonHistory(t *testing.T) {
	d := decide(policy(), nv("a", in(contract.StateUpgradeRequired), cordoned))
	if v := *d.Actions[0].Change.Annotations[keys.UpgradeWasCordoned()]; v != "true" {
		t.Fatalf("was-cordoned = %s, want true", v)
	}
	// A retried node keeps the first record (it is cordoned by now).
	d = decide(policy(), nv("a", in(contract.StateUpgradeRequired), cordoned, wasCordoned(false)))
	if _, ok := d.Actions[0].Change.Annotations[keys.UpgradeWasCordoned()]; ok {
		t.Fatal("the first was-cordoned record must be kept on retry")
	}
}

func TestCanaryFirst(t *testing.T) {
	p := policy(func(p *Policy) { p.MaxParallel = 0; p.MaxUnavailable = intstr.FromString("100%") })
	q := in(contract.StateUpgradeRequired)
	want(t, decide(p, nv("a", q), nv("b", q, canary), nv("c", q)), "b:upgrade-required>cordon-required")
	// Canary in flight: the rest wait.
	d := decide(p, nv("a", q), nv("b", canary, in(contract.StateRebootRequired), rebooting))
	want(t, d)
	if !strings.Contains(d.Waiting["a"], "canary") {
		t.Fatalf("waiting = %q", d.Waiting["a"])
	}
	// Canary done: the rest go.
	want(t, decide(p, nv("a", q), nv("b", canary, loaded("2.0")), nv("c", q)),
		"a:upgrade-required>cordon-required", "c:upgrade-required>cordon-required")
	// Canary failed: stuck.
	d = decide(p, nv("a", q), nv("b", canary, in(contract.StateFailed)))
	if d.Outcome != Stuck {
		t.Fatalf("a failed canary must stop the rollout, got %s", d.Outcome)
	}
}

// A canary selector that matches no NPU node takes the canary phase away
// without a word from Decide; NoCanaryWarning says so.
func TestNoCanaryWarning(t *testing.T) {
	q := in(contract.StateUpgradeRequired)
	sel := func(s string) func(*Policy) {
		return func(p *Policy) {
			var err error
			if p.Canary, err = labels.Parse(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	none := Snapshot{Nodes: []NodeView{nv("a", q), nv("b", q)}}
	if w := NoCanaryWarning(none, policy()); w != "" {
		t.Errorf("no selector: %q", w)
	}
	if w := NoCanaryWarning(Snapshot{Nodes: []NodeView{nv("a", q), nv("b", canary, loaded("2.0"))}}, policy(sel("npu.example.com/canary=true"))); w != "" {
		t.Errorf("a matching node (already upgraded): %q", w)
	}
	w := NoCanaryWarning(none, policy(sel("npu.example.com/canary=true")))
	if !strings.Contains(w, `"npu.example.com/canary=true" matches no NPU node`) || !strings.Contains(w, "kubectl label node <node> npu.example.com/canary=true") {
		t.Errorf("no matching node: %q", w)
	}
	if w := NoCanaryWarning(none, policy(sel("tier in (canary)"))); !strings.Contains(w, "matches no NPU node") || strings.Contains(w, "kubectl label") {
		t.Errorf("set-based selector: %q", w)
	}
	// Decide itself goes on without canaries: every node is a candidate.
	p := policy(sel("npu.example.com/canary=true"), func(p *Policy) { p.MaxParallel = 0; p.MaxUnavailable = intstr.FromString("100%") })
	want(t, decide(p, nv("a", q), nv("b", q)), "a:upgrade-required>cordon-required", "b:upgrade-required>cordon-required")
}

func readyDriver(n *NodeView) {
	n.Driver = &DriverPod{Name: "drv-" + n.Name, Version: n.Desired, Ready: true, ReadyAt: now.Add(-time.Hour)}
}

func TestOutcomes(t *testing.T) {
	if d := decide(policy(), nv("a", loaded("2.0"), readyDriver), nv("b", loaded("2.0"), readyDriver)); d.Outcome != Finished {
		t.Fatalf("all up to date: %s %v", d.Outcome, d.Waiting)
	}
	// Right after an install no node was validated: finished only once
	// every driver pod is Ready.
	if d := decide(policy(), nv("a", loaded("2.0"), readyDriver), nv("b", loaded("2.0"))); d.Outcome != Running || !strings.Contains(d.Waiting["b"], "driver pod not Ready") {
		t.Fatalf("a node without a Ready driver pod: %s %v", d.Outcome, d.Waiting)
	}
	if d := decide(policy(func(p *Policy) { p.Paused = true }), nv("a", in(contract.StateUpgradeRequired))); d.Outcome != Paused {
		t.Fatalf("paused: %s", d.Outcome)
	}
	if d := decide(policy(), nv("a", in(contract.StateFailed)), nv("b", loaded("2.0"), readyDriver)); d.Outcome != Stuck {
		t.Fatalf("failed node left: %s", d.Outcome)
	}
	if d := decide(policy(), nv("a", in(contract.StateUpgradeRequired)), nv("f", in(contract.StateFailed))); d.Outcome != Stuck {
		t.Fatalf("failure budget spent with nodes queued: %s", d.Outcome)
	}
	if d := decide(policy(), nv("a", in(contract.StateUpgradeRequired), notReady)); d.Outcome != Finished || len(d.LeftBehind) != 1 {
		t.Fatalf("a NotReady node is left behind, not waited for: %s %+v", d.Outcome, d.LeftBehind)
	}
	if d := Decide(Snapshot{Busy: map[string]string{"a": busyEvicting}, Nodes: []NodeView{nv("a", in(contract.StatePodDeletionRequired))}}, policy(), keys, now); len(d.Actions) != 0 || d.Outcome != Running {
		t.Fatalf("a busy node gets no action and the rollout keeps running: %v %s", moves(d), d.Outcome)
	}
	if d := Decide(Snapshot{NoDriver: true}, policy(), keys, now); d.Outcome != Finished {
		t.Fatalf("no driver managed: %s", d.Outcome)
	}
}

func TestUnknownStateFails(t *testing.T) {
	n := nv("a", func(n *NodeView) { n.StateKnown, n.RawState = false, "exploded" })
	d := decide(policy(), n)
	want(t, d, "a:done>upgrade-failed")
	if r := *d.Actions[0].Change.Annotations[keys.UpgradeFailureReason()]; !strings.Contains(r, "exploded") {
		t.Fatalf("reason %q must name the bad value", r)
	}
}

func TestRollbackBeforeRebootReturnsNode(t *testing.T) {
	want(t, decide(policy(), nv("a", in(contract.StateDrainRequired), loaded("2.0"))), "a:drain-required>uncordon-required")
	want(t, decide(policy(), nv("a", in(contract.StateUpgradeRequired), loaded("2.0"))), "a:upgrade-required>done")
	// Unless another version was already installed over the loaded one:
	// the node keeps its reboot, before which the driver pod installs the
	// desired version again (the next boot would load the other).
	onDisk := func(v string) func(*NodeView) { return func(n *NodeView) { n.Installed = v } }
	before := func(n *NodeView) { n.UpgradeBootID, n.Target, n.RebootRequired = "boot-a", "3.0", true }
	d := decide(policy(func(p *Policy) { p.AutoUpgrade = true }), nv("a", in(contract.StateRebootRequired), loaded("2.0"), onDisk("3.0"), before))
	want(t, d, "a:reboot-required>reboot-required")
	if got := d.Actions[0].Change.Annotations[keys.UpgradeTarget()]; got == nil || *got != "2.0" {
		t.Fatalf("target %v, want the desired 2.0", got)
	}
	// Installed again: the rollback shortcut gives the node back.
	want(t, decide(policy(), nv("a", in(contract.StateRebootRequired), loaded("2.0"), onDisk("2.0"), before)), "a:reboot-required>uncordon-required")
}

// An idle node whose loaded driver is the desired one but whose disk holds
// another is upgraded: the next boot would load the other.
func TestInstalledVersionOtherThanDesiredIsOutOfDate(t *testing.T) {
	d := decide(policy(), nv("a", loaded("2.0"), func(n *NodeView) { n.Installed = "3.0" }))
	want(t, d, "a:done>upgrade-required")
	if !strings.Contains(d.Actions[0].Message, "3.0 installed on disk") {
		t.Fatalf("message %q must name the version on disk", d.Actions[0].Message)
	}
	want(t, decide(policy(), nv("a", loaded("2.0"), func(n *NodeView) { n.Installed = "2.0" })))
}

// A rollout that first looks after the reboot completed (the rebooter
// already cleared its start time, the new driver already loaded) must
// validate the new boot and re-roll, not take it for a rollback.
func TestRebootSeenOnlyAfterCompletionIsValidated(t *testing.T) {
	after := func(n *NodeView) { n.UpgradeBootID, n.BootID = "boot-a", "boot-b" }
	want(t, decide(policy(), nv("a", in(contract.StateRebootRequired), loaded("2.0"), after)), "a:reboot-required>validation-required")
	// Still the rollback shortcut when the node did not boot.
	before := func(n *NodeView) { n.UpgradeBootID = "boot-a" }
	want(t, decide(policy(), nv("a", in(contract.StateRebootRequired), loaded("2.0"), before)), "a:reboot-required>uncordon-required")
}

func TestFailureBeforeRebootUncordons(t *testing.T) {
	b := builder{k: keys, now: now}
	a := b.fail(nv("a", in(contract.StatePodDeletionRequired), wasCordoned(false)), StepPodDeletion, "PDB")
	if a.Change.Unschedulable == nil || *a.Change.Unschedulable {
		t.Fatal("a node that failed before its reboot runs the old driver: give it back")
	}
	a = b.fail(nv("a", in(contract.StatePodDeletionRequired), wasCordoned(true)), StepPodDeletion, "PDB")
	if a.Change.Unschedulable != nil {
		t.Fatal("a node cordoned before the upgrade stays cordoned")
	}
	if len(a.Events) != 1 || !strings.Contains(a.Events[0].Message, "driver-upgrade-state=upgrade-required") {
		t.Fatalf("the UpgradeFailed event must say how to retry: %+v", a.Events)
	}
}

func TestStragglersReRolledAtTheEnd(t *testing.T) {
	drv := &DriverPod{Name: "d", Version: "2.0", Ready: true, ReadyAt: now.Add(-time.Minute)}
	n := nv("a", loaded("2.0"), func(n *NodeView) {
		n.Driver = drv
		n.TargetPods["ns/dp"] = []TargetPod{{UID: "old", Started: now.Add(-time.Hour)}}
	})
	d := decide(policy(), n)
	want(t, d, "a:delete-1")
	if d.Outcome != Running {
		t.Fatalf("with stragglers the rollout is not finished: %s", d.Outcome)
	}
	// A pod still held by the driver gate (not started) will start after:
	// it is no straggler, but the stack does not work on the node yet.
	n.TargetPods["ns/dp"] = []TargetPod{{UID: "gated"}}
	d = decide(policy(), n)
	if len(d.Actions) != 0 || d.Outcome != Running || !strings.Contains(d.Waiting["a"], "ns/dp") {
		t.Fatalf("an unstarted pod is no straggler, yet the rollout waits for it: %v %s %q", moves(d), d.Outcome, d.Waiting["a"])
	}
	// Its replacement after a re-roll counts once Ready; a terminating old
	// one next to it does not hold the finish.
	n.TargetPods["ns/dp"] = []TargetPod{{UID: "old", Started: now.Add(-time.Hour), Terminating: true}, {UID: "new", Started: now, Ready: true}}
	if d := decide(policy(), n); len(d.Actions) != 0 || d.Outcome != Finished {
		t.Fatalf("a Ready pod started after the driver finishes the rollout: %v %s %v", moves(d), d.Outcome, d.Waiting)
	}
	// A node without any pod of the target (not scheduled there) is not waited on.
	n.TargetPods["ns/dp"] = nil
	if d := decide(policy(), n); d.Outcome != Finished {
		t.Fatalf("no pod of a target on a node is not a wait: %s %v", d.Outcome, d.Waiting)
	}
}

func TestPlanOrdersCanariesAndWaves(t *testing.T) {
	p := policy(func(p *Policy) { p.MaxParallel = 2; p.MaxUnavailable = intstr.FromString("100%") })
	s := Snapshot{Nodes: []NodeView{nv("a"), nv("b", canary), nv("c"), nv("d"), nv("e", skip), nv("f", loaded("2.0")), nv("g", notReady)}}
	got := Plan(s, p, now)
	var order []string
	for _, e := range got {
		order = append(order, fmt.Sprintf("%d/%d:%s", e.Order, e.Wave, e.Node))
	}
	exp := "1/1:b 2/2:a 3/2:c 4/3:d 0/0:e 0/0:f 0/0:g"
	if strings.Join(order, " ") != exp {
		t.Fatalf("plan = %s, want %s", strings.Join(order, " "), exp)
	}
	if !strings.Contains(got[4].Note, "skip") || !strings.Contains(got[6].Note, "NotReady") {
		t.Fatalf("skipped nodes must say why: %+v", got[4:])
	}
}

func sn(s contract.UpgradeState) string {
	if s == "" {
		return "done"
	}
	return string(s)
}

// TestWaitingNotesNameTheBlocker: a waiting node's note names what it
// waits for and the fix, never a generic guess.
func TestWaitingNotesNameTheBlocker(t *testing.T) {
	sel := labels.SelectorFromSet(labels.Set{"job": "train"})
	waitPol := policy(func(p *Policy) { p.WaitForCompletion = WaitPolicy{Selector: sel, Timeout: 5 * time.Minute} })
	fourPods := func(n *NodeView) {
		n.WaitPods, n.WaitPodNames = 4, []string{"ml/train-0", "ml/train-1", "ml/train-2"}
	}
	for name, tc := range map[string]struct {
		p     Policy
		n     NodeView
		wants []string
	}{
		"approval missing": {policy(), nv("a", rebooting), []string{"waiting for approval", "kubectl annotate node a npu.openfuyao.com/approve-reboot=true"}},
		"approval with another value": {policy(), nv("a", rebooting, func(n *NodeView) { n.ApprovalValue = "yes" }),
			[]string{`npu.openfuyao.com/approve-reboot="yes" is not an approval`, `only "true"`, "kubectl annotate node a npu.openfuyao.com/approve-reboot=true --overwrite"}},
		"waitForCompletion pods": {waitPol, nv("a", in(contract.StateWaitForJobsRequired), fourPods),
			[]string{"4 pods", "ml/train-0, ml/train-1, ml/train-2 and 1 more", "waitForCompletion", "at most 4m0s more"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := decide(tc.p, tc.n).Waiting["a"]
			for _, w := range tc.wants {
				if !strings.Contains(got, w) {
					t.Errorf("note %q must contain %q", got, w)
				}
			}
		})
	}
}
