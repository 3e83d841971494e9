package reboot

import (
	"strings"
	"testing"
	"time"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/window"
)

// now (decide_test.go) is Friday 2026-05-01 12:00 UTC.
func recoveryWindows(t *testing.T, specs ...string) func(*Policy) {
	t.Helper()
	s, err := window.ParseAll(specs)
	if err != nil {
		t.Fatal(err)
	}
	return func(p *Policy) { p.AutoRecover, p.RecoveryWindows = true, s }
}

func TestRecoveryWaitsForItsWindow(t *testing.T) {
	with := func(f Facts, edit func(*Facts)) Facts { edit(&f); return f }
	closed := recoveryWindows(t, "sat 22:00-04:00 Asia/Shanghai")
	recoveryCordoned := func(extra ...string) *Facts {
		f := facts(pending("recovery", append([]string{"driver-upgrade.recovery-cordoned", "true"}, extra...)...))
		f.Node.Spec.Unschedulable = true
		return &f
	}
	cases := []struct {
		name   string
		facts  Facts
		policy func(*Policy)
		want   Action
		why    string
	}{
		{name: "outside the window: cordoned first, no slot taken", facts: facts(pending("recovery")), policy: closed,
			want: Action{Kind: Cordon}, why: "waits for its maintenance window"},
		{name: "a slot held from before is given back", facts: with(facts(pending("recovery")), func(f *Facts) { f.SlotHeld = true }), policy: closed,
			want: Action{Kind: ReleaseSlot, Cause: CauseWindow}},
		{name: "cordoned: drains and waits for the opening, saying until when", facts: *recoveryCordoned(), policy: closed,
			want: Action{Kind: Wait, Cause: CauseWindow, Event: contract.EventMaintenanceWindowClosed, Drain: true},
			why:  "node npu-0: its recovery reboot (reason=recovery) waits for the maintenance window (recoveryPolicy.maintenanceWindows): closed until 2026-05-02T22:00:00+08:00 (in 26h0m0s"},
		{name: "an approval reboots at once", facts: facts(pending("recovery", "approve-reboot", "true")), policy: closed,
			want: Action{Kind: AcquireSlot}},
		{name: "inside the window: as before", facts: facts(pending("recovery")), policy: recoveryWindows(t, "fri 19:00-21:00 Asia/Shanghai"),
			want: Action{Kind: AcquireSlot}},
		{name: "no window: as before", facts: facts(pending("recovery")), policy: func(p *Policy) { p.AutoRecover = true },
			want: Action{Kind: AcquireSlot}},
		{name: "manual recovery waits for its approval, not the window", facts: facts(pending("recovery")),
			policy: func(p *Policy) { closed(p); p.AutoRecover = false },
			want:   Action{Kind: Wait, Cause: CauseApproval, Event: contract.EventRebootPending}},
		{name: "storm protection comes first: no cordon", facts: with(facts(pending("recovery")), func(f *Facts) { f.Fleet = Fleet{NPUNodes: 5, Wedged: 5} }), policy: closed,
			want: Action{Kind: Wait, Cause: CauseStorm, Event: contract.EventRecoveryPaused, Warning: true}},
		{name: "the loop guard refuses before the cordon", facts: facts(pending("recovery", "driver-upgrade.reboot-history", history(30, 20, 10))), policy: closed,
			want: Action{Kind: Wait, Cause: CauseBudget, Event: contract.EventRebootRefused, Warning: true}},
		{name: "upgrade reboots are not bound by the recovery window", facts: facts(pending("upgrade")), policy: func(p *Policy) { closed(p); p.AutoUpgrade = true },
			want: Action{Kind: AcquireSlot}},
		{name: "a reboot already recorded goes on", facts: with(facts(pending("recovery", "driver-upgrade.reboot-from-boot-id", "boot-1")), func(f *Facts) { f.SlotHeld = true }), policy: closed,
			want: Action{Kind: Reboot}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := policy()
			if tc.policy != nil {
				tc.policy(&p)
			}
			got := Decide(tc.facts, p, now)
			if got.Kind != tc.want.Kind || got.Cause != tc.want.Cause || got.Event != tc.want.Event || got.Warning != tc.want.Warning || got.Drain != tc.want.Drain {
				t.Fatalf("got %s/%s event %q warning %t drain %t (%s); want %s/%s event %q warning %t drain %t",
					got.Kind, got.Cause, got.Event, got.Warning, got.Drain, got.Why, tc.want.Kind, tc.want.Cause, tc.want.Event, tc.want.Warning, tc.want.Drain)
			}
			if !strings.Contains(got.Why, tc.why) {
				t.Fatalf("why = %q, want it to contain %q", got.Why, tc.why)
			}
		})
	}
	// The wait ends at the opening, on this node's clock.
	got := Decide(*recoveryCordoned(), func() Policy { p := policy(); closed(&p); return p }(), now)
	if want := time.Date(2026, 5, 2, 14, 0, 0, 0, time.UTC); !got.Until.Equal(want) {
		t.Fatalf("until = %s, want the opening %s", got.Until, want)
	}
}

// An upgrade reboot the rollout holds for its window waits, unless
// approved; the hold does not touch a recovery.
func TestUpgradeHeldByTheRollout(t *testing.T) {
	with := func(f Facts, edit func(*Facts)) Facts { edit(&f); return f }
	auto := func(p *Policy) { p.AutoUpgrade, p.AutoRecover = true, true }
	cases := []struct {
		name  string
		facts Facts
		want  Action
	}{
		{name: "held", facts: facts(pending("upgrade", "driver-upgrade.reboot-hold", "maintenance-window")),
			want: Action{Kind: Wait, Cause: CauseWindow, Event: contract.EventRebootPending}},
		{name: "held gives its slot back", facts: with(facts(pending("upgrade", "driver-upgrade.reboot-hold", "maintenance-window")), func(f *Facts) { f.SlotHeld = true }),
			want: Action{Kind: ReleaseSlot, Cause: CauseWindow}},
		{name: "approved goes through", facts: facts(pending("upgrade", "driver-upgrade.reboot-hold", "maintenance-window", "approve-reboot", "true")),
			want: Action{Kind: AcquireSlot}},
		{name: "a recovery is not held by the upgrade's hold", facts: facts(pending("recovery", "driver-upgrade.reboot-hold", "maintenance-window")),
			want: Action{Kind: AcquireSlot}},
	}
	for _, tc := range cases {
		p := policy()
		auto(&p)
		got := Decide(tc.facts, p, now)
		if got.Kind != tc.want.Kind || got.Cause != tc.want.Cause || got.Event != tc.want.Event {
			t.Errorf("%s: got %s/%s %q (%s); want %s/%s %q", tc.name, got.Kind, got.Cause, got.Event, got.Why, tc.want.Kind, tc.want.Cause, tc.want.Event)
		}
	}
	// Manual mode: the approval it waits for is the one that lets it through.
	got := Decide(facts(pending("upgrade", "driver-upgrade.reboot-hold", "maintenance-window")), policy(), now)
	if got.Cause != CauseApproval {
		t.Errorf("manual: %s (%s), want the approval", got.Cause, got.Why)
	}
}
