package health

import (
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/internal/contract"
)

var (
	pass = Result{OK: true}
	fail = Result{Reason: "unhealthy chips: NPU 3 chip 0 Critical"}
)

func ptrBool(b bool) *bool { return &b }

func reasons(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Reason))
	}
	return out
}

func TestDecide(t *testing.T) {
	policy := Policy{FailureThreshold: 3, RecoveryThreshold: 1}
	healthyNode := NodeView{DriverReady: contract.True}
	recoveryNode := NodeView{RebootRequired: true, RebootReason: "recovery", DriverReady: contract.False}
	upgradeNode := NodeView{RebootRequired: true, RebootReason: "upgrade", DriverReady: contract.True}
	for _, tc := range []struct {
		name     string
		failures int
		obs      Observation
		want     Actions
		wantFail int
		events   []string
	}{
		{
			name: "fresh boot, no marker yet: not ready, nothing counted",
			obs:  Observation{Probe: fail}, want: Actions{DriverReady: ptrBool(false)},
		},
		{
			name:     "fresh boot, failures do not accumulate without a marker",
			failures: 2, obs: Observation{Probe: fail, Node: NodeView{DriverReady: contract.False}},
		},
		{
			name: "marker appears and probe passes: ready",
			obs:  Observation{Probe: pass, Marker: true}, want: Actions{DriverReady: ptrBool(true)},
		},
		{
			name: "healthy and labelled: nothing to do",
			obs:  Observation{Probe: pass, Marker: true, Node: healthyNode},
		},
		{
			name: "probe passes without marker: not ready (driver entry not done)",
			obs:  Observation{Probe: pass, Node: healthyNode}, want: Actions{DriverReady: ptrBool(false)},
		},
		{
			name: "first failure is only counted",
			obs:  Observation{Probe: fail, Marker: true, Node: healthyNode}, wantFail: 1,
		},
		{
			name:     "second failure is only counted",
			failures: 1, obs: Observation{Probe: fail, Marker: true, Node: healthyNode}, wantFail: 2,
		},
		{
			name:     "a pass resets the count (false positive below threshold)",
			failures: 2, obs: Observation{Probe: pass, Marker: true, Node: healthyNode},
		},
		{
			name:     "threshold reached: wedge and ask for recovery",
			failures: 2, obs: Observation{Probe: fail, Marker: true, Node: healthyNode}, wantFail: 3,
			want:   Actions{DriverReady: ptrBool(false), RequestRecovery: true, RemoveMarker: true, RecordWedge: true},
			events: []string{"ChipWedged", "RebootRequired"},
		},
		{
			name:     "threshold reached with an upgrade reboot pending: never touch it",
			failures: 2, obs: Observation{Probe: fail, Marker: true, Node: upgradeNode}, wantFail: 3,
			want:   Actions{DriverReady: ptrBool(false), RemoveMarker: true, RecordWedge: true},
			events: []string{"ChipWedged"},
		},
		{
			name:     "still wedged: nothing new",
			failures: 3, obs: Observation{Probe: fail, WedgeRecorded: true, Node: recoveryNode}, wantFail: 3,
		},
		{
			name: "restart with a recovery request and a wedged chip keeps it",
			obs:  Observation{Probe: fail, WedgeRecorded: true, Node: recoveryNode}, wantFail: 1,
		},
		{
			name: "restart after a crash between patch and marker removal finishes the wedge",
			obs:  Observation{Probe: fail, Marker: true, Node: recoveryNode}, wantFail: 1,
			want: Actions{RemoveMarker: true, RecordWedge: true},
		},
		{
			name: "crash between wedge record and marker removal: remove it",
			obs:  Observation{Probe: fail, Marker: true, WedgeRecorded: true, Node: recoveryNode}, wantFail: 1,
			want: Actions{RemoveMarker: true},
		},
		{
			name: "wedge recorded, request cleared by a finished reboot: below threshold only counted",
			obs:  Observation{Probe: fail, WedgeRecorded: true, Node: NodeView{DriverReady: contract.False}}, wantFail: 1,
		},
		{
			name:     "wedge recorded, request cleared by a finished reboot: at threshold ask again",
			failures: 2, obs: Observation{Probe: fail, WedgeRecorded: true, Node: NodeView{DriverReady: contract.False}}, wantFail: 3,
			want:   Actions{RequestRecovery: true},
			events: []string{"ChipWedged", "RebootRequired"},
		},
		{
			name:     "wedge recorded, upgrade reboot pending: never ask on top of it",
			failures: 3, obs: Observation{Probe: fail, WedgeRecorded: true, Node: NodeView{RebootRequired: true, RebootReason: "upgrade", DriverReady: contract.False}}, wantFail: 3,
		},
		{
			name: "stale recovery request, driver entry not done: no record, no marker to take",
			obs:  Observation{Probe: fail, Node: recoveryNode}, wantFail: 1,
		},
		{
			name:     "healed after detection: withdraw, restore, ready",
			failures: 3, obs: Observation{Probe: pass, WedgeRecorded: true, Node: recoveryNode},
			want:   Actions{DriverReady: ptrBool(true), WithdrawRecovery: true, RestoreMarker: true, ClearWedge: true, CountWedge: true},
			events: []string{"ChipRecovered"},
		},
		{
			name:     "healed with an upgrade reboot pending: marker back, upgrade untouched",
			failures: 3, obs: Observation{Probe: pass, WedgeRecorded: true, Node: NodeView{RebootRequired: true, RebootReason: "upgrade", DriverReady: contract.False}},
			want:   Actions{DriverReady: ptrBool(true), RestoreMarker: true, ClearWedge: true},
			events: []string{"ChipRecovered"},
		},
		{
			name: "crash between withdraw and marker restore: restore on next pass",
			obs:  Observation{Probe: pass, WedgeRecorded: true, Node: NodeView{DriverReady: contract.False}},
			want: Actions{DriverReady: ptrBool(true), RestoreMarker: true, ClearWedge: true}, events: []string{"ChipRecovered"},
		},
		{
			name: "recovery request from before a reboot, chips fine, driver entry done: withdraw",
			obs:  Observation{Probe: pass, Marker: true, Node: recoveryNode},
			want: Actions{DriverReady: ptrBool(true), WithdrawRecovery: true}, events: []string{"ChipRecovered"},
		},
		{
			name: "recovery request from before a reboot, driver entry not done: withdraw, not ready, no marker forged",
			obs:  Observation{Probe: pass, Node: recoveryNode},
			want: Actions{WithdrawRecovery: true}, events: []string{"ChipRecovered"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, got := Decide(policy, State{Failures: tc.failures}, tc.obs)
			if st.Failures != tc.wantFail {
				t.Errorf("failures %d, want %d", st.Failures, tc.wantFail)
			}
			if gr, wr := reasons(got.Events), tc.events; strings.Join(gr, ",") != strings.Join(wr, ",") {
				t.Errorf("events %v, want %v", gr, wr)
			}
			got.Events = nil
			if !sameActions(got, tc.want) {
				t.Errorf("actions %s, want %s", describe(got), describe(tc.want))
			}
		})
	}
}

func TestDecideEventMessagesCarryTheReason(t *testing.T) {
	_, a := Decide(Policy{FailureThreshold: 1, RecoveryThreshold: 1}, State{}, Observation{Probe: fail, Marker: true, Node: NodeView{DriverReady: contract.True}})
	for _, e := range a.Events {
		if !strings.Contains(e.Message, "reason=recovery") || !strings.Contains(e.Message, "NPU 3 chip 0 Critical") || !e.Warning {
			t.Errorf("%s event message %q: want reason=recovery and the failing chip, as a warning", e.Reason, e.Message)
		}
	}
	_, a = Decide(Policy{FailureThreshold: 1, RecoveryThreshold: 1}, State{}, Observation{Probe: pass, WedgeRecorded: true, Node: NodeView{RebootRequired: true, RebootReason: "recovery"}})
	if len(a.Events) != 1 || !strings.Contains(a.Events[0].Message, "reason=recovery withdrawn") {
		t.Errorf("recovery events %+v", a.Events)
	}
}

func TestDecideFullSequenceWithRestart(t *testing.T) {
	p := Policy{FailureThreshold: 3, RecoveryThreshold: 1}
	// The world the actions act on, as the watcher would keep it.
	node := NodeView{}
	marker, record := true, false
	apply := func(a Actions) {
		if a.DriverReady != nil {
			node.DriverReady = map[bool]string{true: contract.True, false: contract.False}[*a.DriverReady]
		}
		if a.RequestRecovery {
			node.RebootRequired, node.RebootReason = true, "recovery"
		}
		if a.WithdrawRecovery {
			node.RebootRequired, node.RebootReason = false, ""
		}
		marker = (marker || a.RestoreMarker) && !a.RemoveMarker
		record = (record || a.RecordWedge) && !a.ClearWedge
	}
	st := State{}
	step := func(r Result) Actions {
		var a Actions
		st, a = Decide(p, st, Observation{Probe: r, Marker: marker, WedgeRecorded: record, Node: node})
		apply(a)
		return a
	}
	step(pass)
	for i := 0; i < 3; i++ {
		step(fail)
	}
	if !node.RecoveryRequested() || marker || node.DriverReady != contract.False {
		t.Fatalf("after 3 failures: node %+v marker %v", node, marker)
	}
	st = State{} // the watch restarts
	if a := step(fail); !a.Empty() || !node.RecoveryRequested() || marker {
		t.Fatalf("restart undid the wedge: %s", describe(a))
	}
	step(pass)
	if node.RebootRequired || !marker || record || node.DriverReady != contract.True {
		t.Fatalf("after recovery: node %+v marker %v record %v", node, marker, record)
	}
}

func sameActions(a, b Actions) bool {
	return describe(a) == describe(b)
}

func describe(a Actions) string {
	ready := "-"
	if a.DriverReady != nil {
		ready = map[bool]string{true: "true", false: "false"}[*a.DriverReady]
	}
	return strings.Join([]string{"ready=" + ready,
		flag("request", a.RequestRecovery), flag("withdraw", a.WithdrawRecovery),
		flag("remove", a.RemoveMarker), flag("restore", a.RestoreMarker),
		flag("record", a.RecordWedge), flag("clear", a.ClearWedge), flag("count", a.CountWedge)}, " ")
}

func flag(name string, v bool) string {
	if v {
		return name
	}
	return "!" + name
}

// A wedge is undone only after RecoveryThreshold passing probes in a row;
// a failure in between starts the count again. Undoing it withdraws the
// recovery request and counts the wedge for the loop guard, unless a
// reboot is already recorded (the guard judges that reboot itself).
func TestRecoveryHysteresis(t *testing.T) {
	p := Policy{FailureThreshold: 3, RecoveryThreshold: 3}
	wedgedNode := NodeView{RebootRequired: true, RebootReason: "recovery", DriverReady: contract.False}
	rebooting := wedgedNode
	rebooting.RebootInFlight = true
	for _, tc := range []struct {
		name   string
		node   NodeView
		probes []Result
		// want is the actions of the last probe; passes the count after it.
		want   string
		passes int
	}{
		{"one pass proves nothing", wedgedNode, []Result{pass}, "ready=- !request !withdraw !remove !restore !record !clear !count", 1},
		{"two passes neither", wedgedNode, []Result{pass, pass}, "ready=- !request !withdraw !remove !restore !record !clear !count", 2},
		{"a failure starts again", wedgedNode, []Result{pass, pass, fail, pass, pass}, "ready=- !request !withdraw !remove !restore !record !clear !count", 2},
		{"three in a row undo it and count it", wedgedNode, []Result{pass, fail, pass, pass, pass}, "ready=true !request withdraw !remove restore !record clear count", 0},
		{"a recorded reboot is not counted twice", rebooting, []Result{pass, pass, pass}, "ready=true !request withdraw !remove restore !record clear !count", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := State{}
			var a Actions
			for _, r := range tc.probes {
				st, a = Decide(p, st, Observation{Probe: r, Marker: false, WedgeRecorded: true, Node: tc.node})
			}
			if got := describe(a); got != tc.want || st.Passes != tc.passes {
				t.Fatalf("got %s, passes %d; want %s, passes %d", got, st.Passes, tc.want, tc.passes)
			}
			if a.WithdrawRecovery {
				if len(a.Events) != 1 || !strings.Contains(a.Events[0].Message, "3 consecutive passing probes") {
					t.Fatalf("events %+v: want ChipRecovered naming the passes", a.Events)
				}
				if counted := strings.Contains(a.Events[0].Message, "loop guard"); counted != a.CountWedge {
					t.Fatalf("event %q: mentions the loop guard %t, counted %t", a.Events[0].Message, counted, a.CountWedge)
				}
			}
		})
	}
}
