package rollout

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/openfuyao/npu-stack/internal/contract"
)

func recovering(n *NodeView) {
	n.RebootRequired, n.RebootReason, n.DriverReady = true, string(contract.ReasonRecovery), false
	if n.Driver != nil {
		n.Driver.Ready = false
	}
}

func unreadyDriver(n *NodeView) {
	n.Driver = &DriverPod{Name: "drv-" + n.Name, Version: n.Desired}
}

func leftNames(d Decision) string {
	var out []string
	for _, l := range d.LeftBehind {
		out = append(out, l.Node)
	}
	return strings.Join(out, ",")
}

// TestNodesLeftBehind: nodes that cannot move for reasons of their own do
// not keep the rollout running; nodes in flight always do.
func TestNodesLeftBehind(t *testing.T) {
	wide := policy(func(p *Policy) { p.MaxParallel = 0; p.MaxUnavailable = intstr.FromString("100%") })
	q := in(contract.StateUpgradeRequired)
	for _, tc := range []struct {
		name      string
		p         Policy
		nodes     []NodeView
		outcome   Outcome
		left      string // nodes left behind
		outOfDate bool   // the first left behind still runs an old driver
		reason    string // in the first left behind's reason
		moves     []string
	}{
		{name: "up to date, waiting for a recovery approval (driver pod not Ready)", p: policy(),
			nodes:   []NodeView{nv("a", loaded("2.0"), readyDriver), nv("b", loaded("2.0"), readyDriver, recovering)},
			outcome: Finished, left: "b", reason: "recovery reboot is pending"},
		{name: "up to date, NotReady with its driver pod down", p: policy(),
			nodes:   []NodeView{nv("a", loaded("2.0"), readyDriver), nv("b", loaded("2.0"), unreadyDriver, notReady)},
			outcome: Finished, left: "b", reason: "NotReady"},
		{name: "up to date, driver pod not Ready for no reason of the node's: waited for", p: policy(),
			nodes:   []NodeView{nv("a", loaded("2.0"), readyDriver), nv("b", loaded("2.0"), unreadyDriver)},
			outcome: Running},
		{name: "out of date, recovery pending: not admitted, left behind", p: wide,
			nodes:   []NodeView{nv("a", loaded("2.0"), readyDriver), nv("b", q, recovering)},
			outcome: Finished, left: "b", outOfDate: true, reason: "approve-reboot=true"},
		{name: "out of date and NotReady, another queued: the other is admitted", p: wide,
			nodes:   []NodeView{nv("a", q), nv("b", q, notReady)},
			outcome: Running, left: "b", outOfDate: true, moves: []string{"a:upgrade-required>cordon-required"}},
		{name: "skipped out-of-date node", p: policy(),
			nodes:   []NodeView{nv("a", loaded("2.0"), readyDriver), nv("b", skip)},
			outcome: Finished, left: "b", outOfDate: true, reason: "driver-upgrade.skip-"},
		{name: "in flight and waiting for an approval: never abandoned", p: policy(),
			nodes:   []NodeView{nv("a", loaded("2.0"), readyDriver), nv("b", in(contract.StateRebootRequired), func(n *NodeView) { n.UpgradeBootID, n.RebootRequired, n.RebootReason = "boot-a", true, "upgrade" })},
			outcome: Running},
		{name: "in flight and NotReady (rebooting): never abandoned", p: policy(),
			nodes:   []NodeView{nv("b", in(contract.StateValidationRequired), notReady, func(n *NodeView) { n.UpgradeBootID = "boot-0" })},
			outcome: Running},
		{name: "failed node: stuck, not left behind", p: policy(func(p *Policy) { p.MaxFailures = 0 }),
			nodes:   []NodeView{nv("a", loaded("2.0"), readyDriver), nv("b", in(contract.StateFailed))},
			outcome: Stuck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.p, tc.nodes...)
			want(t, d, tc.moves...)
			if d.Outcome != tc.outcome || leftNames(d) != tc.left {
				t.Fatalf("outcome %s, left behind %q; want %s, %q (waiting %v)", d.Outcome, leftNames(d), tc.outcome, tc.left, d.Waiting)
			}
			if tc.left == "" {
				return
			}
			l := d.LeftBehind[0]
			if l.OutOfDate != tc.outOfDate || !strings.Contains(l.Reason, tc.reason) || d.Waiting[l.Node] == "" {
				t.Fatalf("left behind %+v (note %q); want out of date %t, reason with %q", l, d.Waiting[l.Node], tc.outOfDate, tc.reason)
			}
		})
	}
}

func TestFailsRollout(t *testing.T) {
	upToDate := []LeftBehind{{Node: "a", OutOfDate: false}}
	old := []LeftBehind{{Node: "a"}, {Node: "b", OutOfDate: true}}
	skipped := []LeftBehind{{Node: "b", OutOfDate: true, Skipped: true}}
	for _, tc := range []struct {
		mode contract.LeftBehindMode
		left []LeftBehind
		want bool
	}{
		{contract.LeftBehindFailIfOutOfDate, nil, false},
		{contract.LeftBehindFailIfOutOfDate, upToDate, false},
		{contract.LeftBehindFailIfOutOfDate, old, true},
		{contract.LeftBehindFailIfOutOfDate, skipped, false},
		{contract.LeftBehindAlwaysSucceed, old, false},
		{contract.LeftBehindFail, upToDate, true},
		{contract.LeftBehindFail, skipped, true},
		{contract.LeftBehindFail, nil, false},
	} {
		if got := FailsRollout(tc.mode, tc.left); got != tc.want {
			t.Errorf("FailsRollout(%s, %+v) = %t, want %t", tc.mode, tc.left, got, tc.want)
		}
	}
}

// TestCanaryGate: a skipped canary is not pending; a canary that cannot
// move is left behind; the others start only after a canary passed, and
// are left behind (never pending forever) when none can.
func TestCanaryGate(t *testing.T) {
	p := policy(func(p *Policy) { p.MaxParallel, p.MaxFailures, p.MaxUnavailable = 0, 0, intstr.FromString("100%") })
	q := in(contract.StateUpgradeRequired)
	for _, tc := range []struct {
		name    string
		nodes   []NodeView
		moves   []string
		outcome Outcome
		left    string
		note    string // in a's note
	}{
		{name: "skipped canary, another canary passed: the rest go",
			nodes: []NodeView{nv("a", q), nv("b", canary, skip, q), nv("c", canary, loaded("2.0"), readyDriver)},
			moves: []string{"a:upgrade-required>cordon-required"}, outcome: Running, left: "b"},
		{name: "NotReady canary, another canary passed: the rest go",
			nodes: []NodeView{nv("a", q), nv("b", canary, notReady, q), nv("c", canary, loaded("2.0"), readyDriver)},
			moves: []string{"a:upgrade-required>cordon-required"}, outcome: Running, left: "b"},
		{name: "the only canary NotReady: the rest are left behind, naming it",
			nodes:   []NodeView{nv("a", q), nv("b", canary, notReady, q)},
			outcome: Finished, left: "a,b", note: "no canary can be upgraded (b: node NotReady"},
		{name: "the only canary skipped: the rest are left behind, naming the fix",
			nodes:   []NodeView{nv("a", q), nv("b", canary, skip)},
			outcome: Finished, left: "a,b", note: "canarySelector"},
		{name: "one canary can move: it goes, the rest wait for it",
			nodes: []NodeView{nv("a", q), nv("b", canary, notReady, q), nv("c", canary, q)},
			moves: []string{"c:upgrade-required>cordon-required"}, outcome: Running, left: "b", note: "waiting for the canary nodes to finish"},
		{name: "failed canary: stuck, naming the retry",
			nodes:   []NodeView{nv("a", q), nv("b", canary, in(contract.StateFailed))},
			outcome: Stuck, note: "b failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(p, tc.nodes...)
			want(t, d, tc.moves...)
			if d.Outcome != tc.outcome || leftNames(d) != tc.left {
				t.Fatalf("outcome %s, left behind %q; want %s, %q (waiting %v)", d.Outcome, leftNames(d), tc.outcome, tc.left, d.Waiting)
			}
			if !strings.Contains(d.Waiting["a"], tc.note) {
				t.Fatalf("note of a: %q, want it to contain %q", d.Waiting["a"], tc.note)
			}
		})
	}
}

// TestUncoveredNodesAreGivenBack: the driver disabled, or a node's profile
// removed, while nodes are queued or in flight: they are given back,
// never rebooted for an empty version.
func TestUncoveredNodesAreGivenBack(t *testing.T) {
	gone := func(n *NodeView) { n.ProfileError, n.Desired, n.Profile = "no driver profile covers node", "", "" }
	asked := func(n *NodeView) {
		n.RebootRequired, n.RebootReason, n.UpgradeBootID = true, string(contract.ReasonUpgrade), "boot-a"
	}
	for _, tc := range []struct {
		name       string
		noDriver   bool
		node       NodeView
		uncordon   bool
		withdrawn  bool // the reboot request removed
		keepReboot bool // the reboot request left to the rebooter
	}{
		{name: "driver disabled, queued", noDriver: true, node: nv("a", q(contract.StateUpgradeRequired))},
		{name: "driver disabled, cordon-required: not cordoned by us yet", noDriver: true,
			node: nv("a", q(contract.StateCordonRequired), cordoned, wasCordoned(false))},
		{name: "driver disabled, drain-required", noDriver: true,
			node: nv("a", q(contract.StateDrainRequired), held(false)), uncordon: true},
		{name: "driver disabled, waiting for approval", noDriver: true,
			node: nv("a", q(contract.StateRebootRequired), held(false), asked), uncordon: true, withdrawn: true},
		{name: "profile removed, waiting for approval, cordoned by the admin before",
			node: nv("a", q(contract.StateRebootRequired), held(true), asked, gone), withdrawn: true},
		{name: "profile removed, drain-required", node: nv("a", q(contract.StateDrainRequired), held(false), gone), uncordon: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(Snapshot{Nodes: []NodeView{tc.node}, NoDriver: tc.noDriver}, policy(), keys, now)
			want(t, d, "a:"+sn(tc.node.State)+">done")
			if d.Outcome != Running {
				t.Fatalf("outcome %s while giving back", d.Outcome)
			}
			a := d.Actions[0]
			if u := a.Change.Unschedulable; (u != nil && !*u) != tc.uncordon {
				t.Errorf("uncordon = %v, want %t", u, tc.uncordon)
			}
			_, touched := a.Change.Labels[keys.RebootRequired()]
			if touched != tc.withdrawn {
				t.Errorf("reboot request withdrawn = %t, want %t", touched, tc.withdrawn)
			}
			if v, ok := a.Change.Labels[keys.UpgradeState()]; !ok || v != nil {
				t.Error("the state label must go")
			}
			for _, k := range []string{keys.UpgradeWasCordoned(), keys.UpgradeBootID(), keys.UpgradeSince()} {
				if v, ok := a.Change.Annotations[k]; !ok || v != nil {
					t.Errorf("bookkeeping %s must go", k)
				}
			}
			if len(a.Events) != 1 || a.Events[0].Reason != contract.EventUpgradeAbandoned || !strings.Contains(a.Events[0].Message, "without a reboot") {
				t.Errorf("events %+v, want one UpgradeAbandoned saying why", a.Events)
			}
			// Once given back, nothing is left to do.
			given := tc.node
			given.State, given.RawState, given.RebootRequired = contract.StateDone, "", tc.keepReboot
			if d := Decide(Snapshot{Nodes: []NodeView{given}, NoDriver: tc.noDriver}, policy(), keys, now); len(d.Actions) != 0 {
				t.Errorf("after the give-back: %v", moves(d))
			}
		})
	}
	// A failed node stays for the admin.
	if d := Decide(Snapshot{Nodes: []NodeView{nv("a", q(contract.StateFailed))}, NoDriver: true}, policy(), keys, now); len(d.Actions) != 0 || d.Outcome != Finished {
		t.Fatalf("failed node with the driver disabled: %v %s", moves(d), d.Outcome)
	}
}

func q(s contract.UpgradeState) func(*NodeView) { return in(s) }

// held: the rollout cordoned the node; admin says whether an admin had
// cordoned it before.
func held(admin bool) func(*NodeView) {
	return func(n *NodeView) {
		n.Unschedulable, n.WasCordoned = true, &admin
		n.Cordon = contract.CordonOwners{Upgrade: true, ByAdmin: admin}
	}
}

// TestPlanNamesNodesLeftBehind: plan says which nodes a run will leave
// behind, and does not plan them.
func TestPlanNamesNodesLeftBehind(t *testing.T) {
	got := Plan(Snapshot{Nodes: []NodeView{nv("a"), nv("b", notReady), nv("c", recovering)}}, policy(), now)
	notes := map[string]string{}
	for _, e := range got {
		notes[e.Node] = e.Note
		if e.Node != "a" && e.Order != 0 {
			t.Errorf("%s is planned (order %d); it is left behind", e.Node, e.Order)
		}
	}
	if !strings.HasPrefix(notes["b"], "left behind: node NotReady") || !strings.HasPrefix(notes["c"], "left behind: a recovery reboot is pending") {
		t.Fatalf("plan notes: %v", notes)
	}
}
