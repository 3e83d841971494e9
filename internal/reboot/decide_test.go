package reboot

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/openfuyao/npu-stack/internal/budget"
	"github.com/openfuyao/npu-stack/internal/contract"
)

var (
	keys = contract.Keys{Domain: contract.DefaultDomain}
	now  = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
)

func policy() Policy {
	return Policy{
		Keys:           keys,
		MaxWedgedNodes: intstr.FromString("40%"),
		UptimeGuard:    10 * time.Minute,
		Budget:         budget.Budget{Max: 3, Window: time.Hour},
		IssueTimeout:   5 * time.Minute,
	}
}

// node builds a node from label and annotation edits; keys without a
// domain get the contract domain.
func node(labels, annotations map[string]string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "npu-0", Labels: map[string]string{}, Annotations: map[string]string{}}}
	for k, v := range labels {
		n.Labels[keys.Domain+"/"+k] = v
	}
	for k, v := range annotations {
		n.Annotations[keys.Domain+"/"+k] = v
	}
	return n
}

func pending(reason string, annotations ...string) *corev1.Node {
	ann := map[string]string{"reboot-reason": reason}
	for i := 0; i+1 < len(annotations); i += 2 {
		ann[annotations[i]] = annotations[i+1]
	}
	return node(map[string]string{"reboot-required": "true"}, ann)
}

func facts(n *corev1.Node) Facts {
	return Facts{Node: n, BootID: "boot-1", Uptime: time.Hour, Fleet: Fleet{NPUNodes: 10, Wedged: 1}}
}

func history(mins ...int) string {
	var h budget.History
	for _, m := range mins {
		h = append(h, now.Add(-time.Duration(m)*time.Minute))
	}
	return h.String()
}

func TestDecide(t *testing.T) {
	type tc struct {
		name   string
		facts  Facts
		policy func(*Policy)
		want   Action // Kind, Cause, Event, Warning, Record, Drain, ConsumeApproval compared
		until  time.Duration
		why    string // substring of Why
	}
	with := func(f Facts, edit func(*Facts)) Facts { edit(&f); return f }
	cases := []tc{
		// Nothing pending.
		{name: "idle", facts: facts(node(nil, nil)), want: Action{Kind: Idle}},
		{name: "approval before the need is kept", facts: facts(node(nil, map[string]string{"approve-reboot": "true"})), want: Action{Kind: Idle}},
		{name: "stale slot released", facts: with(facts(node(nil, nil)), func(f *Facts) { f.SlotHeld = true }), want: Action{Kind: ReleaseSlot}},
		{name: "recovery cordon waits for driver-ready", facts: facts(node(map[string]string{"driver-ready": "false"}, map[string]string{"driver-upgrade.recovery-cordoned": "true"})),
			want: Action{Kind: Wait, Cause: CauseDriverReady}},
		{name: "uncordon once the driver is ready", facts: facts(node(map[string]string{"driver-ready": "true"}, map[string]string{"driver-upgrade.recovery-cordoned": "true"})),
			want: Action{Kind: Uncordon}},
		{name: "slot released before uncordon", facts: with(facts(node(map[string]string{"driver-ready": "true"}, map[string]string{"driver-upgrade.recovery-cordoned": "true"})), func(f *Facts) { f.SlotHeld = true }),
			want: Action{Kind: ReleaseSlot}},
		{name: "reboot-required=false is not pending", facts: facts(node(map[string]string{"reboot-required": "false"}, nil)), want: Action{Kind: Idle}},

		// Authorisation.
		{name: "upgrade waits for approval", facts: facts(pending("upgrade")),
			want: Action{Kind: Wait, Cause: CauseApproval, Event: contract.EventRebootPending}, why: "kubectl annotate node npu-0 npu.openfuyao.com/approve-reboot=true"},
		{name: "recovery waits for approval", facts: facts(pending("recovery")),
			want: Action{Kind: Wait, Cause: CauseApproval, Event: contract.EventRebootPending}, why: "reason=recovery"},
		{name: "unknown reason needs approval even with auto", facts: facts(pending("")), policy: func(p *Policy) { p.AutoUpgrade, p.AutoRecover = true, true },
			want: Action{Kind: Wait, Cause: CauseApproval, Event: contract.EventRebootPending}, why: "reason=unspecified"},
		{name: "approve-reboot=false is no approval", facts: facts(pending("upgrade", "approve-reboot", "false")),
			want: Action{Kind: Wait, Cause: CauseApproval, Event: contract.EventRebootPending}},
		{name: "auto-upgrade does not authorise recovery", facts: facts(pending("recovery")), policy: func(p *Policy) { p.AutoUpgrade = true },
			want: Action{Kind: Wait, Cause: CauseApproval, Event: contract.EventRebootPending}},
		{name: "approved upgrade takes a slot", facts: facts(pending("upgrade", "approve-reboot", "true")), want: Action{Kind: AcquireSlot}},
		{name: "auto-upgrade takes a slot", facts: facts(pending("upgrade")), policy: func(p *Policy) { p.AutoUpgrade = true }, want: Action{Kind: AcquireSlot}},
		{name: "auto-recover takes a slot", facts: facts(pending("recovery")), policy: func(p *Policy) { p.AutoRecover = true }, want: Action{Kind: AcquireSlot}},

		// Storm protection.
		{name: "storm pauses auto-recovery", facts: with(facts(pending("recovery")), func(f *Facts) { f.Fleet = Fleet{NPUNodes: 5, Wedged: 5} }),
			policy: func(p *Policy) { p.AutoRecover = true },
			want:   Action{Kind: Wait, Cause: CauseStorm, Event: contract.EventRecoveryPaused, Warning: true}, why: "5 of 5 NPU nodes"},
		{name: "storm at exactly the limit is no storm", facts: with(facts(pending("recovery")), func(f *Facts) { f.Fleet = Fleet{NPUNodes: 5, Wedged: 2} }),
			policy: func(p *Policy) { p.AutoRecover = true }, want: Action{Kind: AcquireSlot}},
		{name: "storm limit as a count", facts: with(facts(pending("recovery")), func(f *Facts) { f.Fleet = Fleet{NPUNodes: 100, Wedged: 4} }),
			policy: func(p *Policy) { p.AutoRecover, p.MaxWedgedNodes = true, intstr.FromInt32(3) },
			want:   Action{Kind: Wait, Cause: CauseStorm, Event: contract.EventRecoveryPaused, Warning: true}},
		{name: "bad storm limit pauses", facts: facts(pending("recovery")),
			policy: func(p *Policy) { p.AutoRecover, p.MaxWedgedNodes = true, intstr.FromString("lots") },
			want:   Action{Kind: Wait, Cause: CauseStorm, Event: contract.EventRecoveryPaused, Warning: true}},
		{name: "manual approval works during a storm", facts: with(facts(pending("recovery", "approve-reboot", "true")), func(f *Facts) { f.Fleet = Fleet{NPUNodes: 5, Wedged: 5} }),
			policy: func(p *Policy) { p.AutoRecover = true }, want: Action{Kind: AcquireSlot}},
		{name: "storm does not stop upgrades", facts: with(facts(pending("upgrade")), func(f *Facts) { f.Fleet = Fleet{NPUNodes: 5, Wedged: 5} }),
			policy: func(p *Policy) { p.AutoRecover, p.AutoUpgrade = true, true }, want: Action{Kind: AcquireSlot}},

		// Loop guard.
		{name: "budget spent refuses", facts: facts(pending("upgrade", "approve-reboot", "true", "driver-upgrade.reboot-history", history(30, 20, 10))),
			want: Action{Kind: Wait, Cause: CauseBudget, Event: contract.EventRebootRefused, Warning: true},
			why:  "kubectl annotate node npu-0 npu.openfuyao.com/driver-upgrade.reboot-history-"},
		{name: "budget partly used reboots", facts: facts(pending("upgrade", "approve-reboot", "true", "driver-upgrade.reboot-history", history(20, 10))),
			want: Action{Kind: AcquireSlot}},
		{name: "unreadable history refuses", facts: facts(pending("upgrade", "approve-reboot", "true", "driver-upgrade.reboot-history", "garbage")),
			want: Action{Kind: Wait, Cause: CauseBadHistory, Event: contract.EventRebootRefused, Warning: true}},
		{name: "a refused node gives its slot back", facts: with(facts(pending("upgrade", "approve-reboot", "true", "driver-upgrade.reboot-history", history(30, 20, 10))), func(f *Facts) { f.SlotHeld = true }),
			want: Action{Kind: ReleaseSlot, Cause: CauseBudget}},

		// Uptime guard and backoff.
		{name: "uptime guard", facts: with(facts(pending("upgrade", "approve-reboot", "true")), func(f *Facts) { f.Uptime = 4 * time.Minute }),
			want: Action{Kind: Wait, Cause: CauseUptime, Event: contract.EventRebootPending}, until: 6 * time.Minute},
		{name: "uptime guard off", facts: with(facts(pending("upgrade", "approve-reboot", "true")), func(f *Facts) { f.Uptime = time.Second }),
			policy: func(p *Policy) { p.UptimeGuard = 0 }, want: Action{Kind: AcquireSlot}},
		{name: "backoff after a failure", facts: with(facts(pending("upgrade", "approve-reboot", "true")), func(f *Facts) { f.RetryAt = now.Add(time.Minute) }),
			want: Action{Kind: Wait, Cause: CauseBackoff}, until: time.Minute},
		{name: "backoff over", facts: with(facts(pending("upgrade", "approve-reboot", "true")), func(f *Facts) { f.RetryAt = now.Add(-time.Second) }),
			want: Action{Kind: AcquireSlot}},
		{name: "waiting for approval gives a slot back", facts: with(facts(pending("upgrade")), func(f *Facts) { f.SlotHeld = true }),
			want: Action{Kind: ReleaseSlot, Cause: CauseApproval}},

		// With a slot.
		{name: "upgrade reboots with the slot, consuming the approval", facts: with(facts(pending("upgrade", "approve-reboot", "true")), func(f *Facts) { f.SlotHeld = true }),
			want: Action{Kind: Reboot, Record: true, ConsumeApproval: true}},
		{name: "auto-upgrade reboots without approval", facts: with(facts(pending("upgrade")), func(f *Facts) { f.SlotHeld = true }),
			policy: func(p *Policy) { p.AutoUpgrade = true }, want: Action{Kind: Reboot, Record: true}, why: "--auto-upgrade"},
		{name: "auto-upgrade still spends a present approval", facts: with(facts(pending("upgrade", "approve-reboot", "true")), func(f *Facts) { f.SlotHeld = true }),
			policy: func(p *Policy) { p.AutoUpgrade = true }, want: Action{Kind: Reboot, Record: true, ConsumeApproval: true}},
		{name: "recovery cordons first", facts: with(facts(pending("recovery", "approve-reboot", "true")), func(f *Facts) { f.SlotHeld = true }),
			want: Action{Kind: Cordon}},
		{name: "recovery drains and reboots once cordoned", facts: with(facts(pending("recovery", "approve-reboot", "true", "driver-upgrade.recovery-cordoned", "true")), func(f *Facts) { f.SlotHeld = true }),
			want: Action{Kind: Reboot, Record: true, Drain: true, ConsumeApproval: true}},

		// Recorded reboots.
		{name: "boot ID changed: complete", facts: facts(pending("upgrade", "driver-upgrade.reboot-from-boot-id", "boot-0")), want: Action{Kind: Complete}},
		{name: "complete even if the marker was removed", facts: facts(node(nil, map[string]string{"driver-upgrade.reboot-from-boot-id": "boot-0"})), want: Action{Kind: Complete}},
		{name: "complete keeps the recorded reason after the requester cleared its own", facts: facts(node(nil, map[string]string{
			"driver-upgrade.reboot-from-boot-id": "boot-0", "driver-upgrade.reboot-started-reason": "recovery"})), want: Action{Kind: Complete}, why: "boot ID changed"},
		{name: "fresh process repeats a recorded reboot without approval", facts: with(facts(pending("upgrade", "driver-upgrade.reboot-from-boot-id", "boot-1")), func(f *Facts) { f.SlotHeld = true }),
			want: Action{Kind: Reboot}},
		{name: "recorded reboot ignores the uptime guard and budget", facts: with(facts(pending("recovery", "driver-upgrade.reboot-from-boot-id", "boot-1", "driver-upgrade.reboot-history", history(30, 20, 10))), func(f *Facts) {
			f.SlotHeld, f.Uptime = true, time.Second
		}), want: Action{Kind: Reboot}},
		{name: "recorded reboot needs a slot", facts: facts(pending("upgrade", "driver-upgrade.reboot-from-boot-id", "boot-1")), want: Action{Kind: AcquireSlot}},
		{name: "issued: wait for the machine to go down", facts: with(facts(pending("upgrade", "driver-upgrade.reboot-from-boot-id", "boot-1")), func(f *Facts) {
			f.SlotHeld, f.IssuedAt = true, now.Add(-time.Minute)
		}), want: Action{Kind: Wait, Cause: CauseGoingDown}, until: 4 * time.Minute},
		{name: "issued but never went down: fail", facts: with(facts(pending("upgrade", "driver-upgrade.reboot-from-boot-id", "boot-1")), func(f *Facts) {
			f.SlotHeld, f.IssuedAt = true, now.Add(-6*time.Minute)
		}), want: Action{Kind: Fail}},
		{name: "recorded reboot backs off without its slot", facts: with(facts(pending("upgrade", "driver-upgrade.reboot-from-boot-id", "boot-1")), func(f *Facts) {
			f.RetryAt = now.Add(time.Minute)
		}), want: Action{Kind: Wait, Cause: CauseBackoff}, until: time.Minute},
		{name: "recorded reboot releases its slot during backoff", facts: with(facts(pending("upgrade", "driver-upgrade.reboot-from-boot-id", "boot-1")), func(f *Facts) {
			f.RetryAt, f.SlotHeld = now.Add(time.Minute), true
		}), want: Action{Kind: ReleaseSlot, Cause: CauseBackoff}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := policy()
			if c.policy != nil {
				c.policy(&p)
			}
			got := Decide(c.facts, p, now)
			if got.Kind != c.want.Kind || got.Cause != c.want.Cause || got.Event != c.want.Event || got.Warning != c.want.Warning ||
				got.Record != c.want.Record || got.Drain != c.want.Drain || got.ConsumeApproval != c.want.ConsumeApproval {
				t.Fatalf("Decide = %+v\nwant      %+v", got, c.want)
			}
			if c.until != 0 && !got.Until.Equal(now.Add(c.until)) {
				t.Errorf("Until = %s, want now+%s", got.Until, c.until)
			}
			if got.Why == "" || !strings.Contains(got.Why, c.why) {
				t.Errorf("Why = %q, want it to mention %q", got.Why, c.why)
			}
		})
	}
}

func TestDecideReasonCarried(t *testing.T) {
	f := facts(pending("recovery"))
	if got := Decide(f, policy(), now); got.Reason != contract.ReasonRecovery {
		t.Fatalf("Reason = %q, want recovery", got.Reason)
	}
	f = facts(node(nil, map[string]string{"driver-upgrade.reboot-from-boot-id": "boot-0", "driver-upgrade.reboot-started-reason": "recovery"}))
	if got := Decide(f, policy(), now); got.Kind != Complete || got.Reason != contract.ReasonRecovery {
		t.Fatalf("Decide = %v reason %q, want complete with the recorded reason recovery", got.Kind, got.Reason)
	}
}
