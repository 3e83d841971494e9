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

// inReboot is a node in the rollout's reboot-required state with a reboot
// pending for reason: loaded driver, installed-version ("" for no record)
// and the upgrade's target.
func inReboot(reason, loaded, installed, target string) *corev1.Node {
	n := pending(reason, "driver-upgrade.target-version", target)
	n.Labels[keys.UpgradeState()] = "reboot-required"
	n.Labels[keys.DriverVersion()] = loaded
	if installed != "" {
		n.Annotations[keys.InstalledDriver()] = installed
	}
	return n
}

func facts(n *corev1.Node) Facts {
	return Facts{Node: n, BootID: "boot-1", Uptime: time.Hour, Fleet: Fleet{NPUNodes: 10, Wedged: 1}}
}

// history is an annotation of original-format entries (times only),
// mins minutes ago.
func history(mins ...int) string {
	var h budget.History
	for _, m := range mins {
		h = append(h, budget.Entry{At: now.Add(-time.Duration(m) * time.Minute)})
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
		{name: "approve-reboot=false is no approval, and says so", facts: facts(pending("upgrade", "approve-reboot", "false")),
			want: Action{Kind: Wait, Cause: CauseApproval, Event: contract.EventApprovalInvalid, Warning: true}, why: `approve-reboot="false" is not an approval`},
		{name: "approve-reboot=yes is no approval, and says so", facts: facts(pending("recovery", "approve-reboot", "yes")),
			want: Action{Kind: Wait, Cause: CauseApproval, Event: contract.EventApprovalInvalid, Warning: true}, why: "approve-reboot=true --overwrite"},
		{name: "auto-upgrade does not authorise recovery", facts: facts(pending("recovery")), policy: func(p *Policy) { p.AutoUpgrade = true },
			want: Action{Kind: Wait, Cause: CauseApproval, Event: contract.EventRebootPending}},
		{name: "approved upgrade takes a slot", facts: facts(pending("upgrade", "approve-reboot", "true")), want: Action{Kind: AcquireSlot}},
		{name: "auto-upgrade takes a slot", facts: facts(pending("upgrade")), policy: func(p *Policy) { p.AutoUpgrade = true }, want: Action{Kind: AcquireSlot}},
		{name: "auto-recover takes a slot", facts: facts(pending("recovery")), policy: func(p *Policy) { p.AutoRecover = true }, want: Action{Kind: AcquireSlot}},

		// The driver pod installs the upgrade's target before the reboot.
		{name: "reboot-required upgrade waits for the target's install", facts: facts(inReboot("upgrade", "25.3.0", "25.3.0", "25.5.0")), policy: func(p *Policy) { p.AutoUpgrade = true },
			want: Action{Kind: Wait, Cause: CauseDriverInstall, Event: contract.EventRebootPending}, why: "install driver 25.5.0"},
		{name: "a recovery reboot in reboot-required waits too", facts: facts(inReboot("recovery", "25.3.0", "25.3.0", "25.5.0")), policy: func(p *Policy) { p.AutoRecover = true },
			want: Action{Kind: Wait, Cause: CauseDriverInstall, Event: contract.EventRebootPending}, why: "would load 25.3.0 again"},
		{name: "the install wait gives the slot back", facts: with(facts(inReboot("upgrade", "25.3.0", "25.3.0", "25.5.0")), func(f *Facts) { f.SlotHeld = true }), policy: func(p *Policy) { p.AutoUpgrade = true },
			want: Action{Kind: ReleaseSlot, Cause: CauseDriverInstall}},
		{name: "target installed: reboot goes ahead", facts: facts(inReboot("upgrade", "25.3.0", "25.5.0", "25.5.0")), policy: func(p *Policy) { p.AutoUpgrade = true },
			want: Action{Kind: AcquireSlot}},
		{name: "target already loaded: reboot goes ahead", facts: facts(inReboot("upgrade", "25.5.0", "25.5.0", "25.5.0")), policy: func(p *Policy) { p.AutoUpgrade = true },
			want: Action{Kind: AcquireSlot}},
		{name: "target loaded but another installed (a rollback before the reboot): waits", facts: facts(inReboot("upgrade", "25.3.0", "25.5.0", "25.3.0")), policy: func(p *Policy) { p.AutoUpgrade = true },
			want: Action{Kind: Wait, Cause: CauseDriverInstall, Event: contract.EventRebootPending}, why: "would load 25.5.0 again"},
		{name: "no driver pod record (driver managed elsewhere): no wait", facts: facts(inReboot("upgrade", "25.3.0", "", "25.5.0")), policy: func(p *Policy) { p.AutoUpgrade = true },
			want: Action{Kind: AcquireSlot}},
		{name: "recovery outside the rollout's reboot-required: no wait", facts: facts(pending("recovery", "installed-driver-version", "25.3.0", "driver-upgrade.target-version", "25.5.0")), policy: func(p *Policy) { p.AutoRecover = true },
			want: Action{Kind: AcquireSlot}},
		{name: "approval is asked before the install is awaited", facts: facts(inReboot("upgrade", "25.3.0", "25.3.0", "25.5.0")),
			want: Action{Kind: Wait, Cause: CauseApproval, Event: contract.EventRebootPending}},

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
			want: Action{Kind: Wait, Cause: CauseUptime, Event: contract.EventRebootPending}, until: 6 * time.Minute, why: "6m0s left"},
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

// hist is a history annotation: each entry "M" (original format, M
// minutes ago) or "M;purpose;outcome".
func hist(entries ...string) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		m, rest, _ := strings.Cut(e, ";")
		var mins int
		for _, c := range m {
			mins = mins*10 + int(c-'0')
		}
		parts[i] = now.Add(-time.Duration(mins) * time.Minute).Format(time.RFC3339)
		if rest != "" {
			parts[i] += ";" + rest
		}
	}
	return strings.Join(parts, ",")
}

// stamp is the time of an entry M minutes ago, as the annotation has it.
func stamp(mins int) string { return now.Add(-time.Duration(mins) * time.Minute).Format(time.RFC3339) }

// TestDecideLoopGuard: the loop guard counts only reboots that did not
// achieve their purpose (an upgrade reboot whose driver version is
// loaded, a recovery reboot after which the chips probe healthy do not
// count), judges past reboots when a new one is asked for or when they
// show success, records each reboot's purpose, and keeps reading the
// original format. Budget 3 per hour.
func TestDecideLoopGuard(t *testing.T) {
	reset := "kubectl annotate node npu-0 npu.openfuyao.com/driver-upgrade.reboot-history-"
	type tc struct {
		name    string
		labels  map[string]string
		ann     map[string]string
		slot    bool
		auto    bool // autoUpgrade and autoRecover
		want    Kind
		cause   Cause
		why     []string
		history string // act.History.String(), checked when set
	}
	upgradeReq := func(target string, more map[string]string) map[string]string {
		a := map[string]string{"reboot-reason": "upgrade", "driver-upgrade.target-version": target}
		for k, v := range more {
			a[k] = v
		}
		return a
	}
	recoveryReq := func(more map[string]string) map[string]string {
		a := map[string]string{"reboot-reason": "recovery", "driver-upgrade.recovery-cordoned": "true"}
		for k, v := range more {
			a[k] = v
		}
		return a
	}
	const H = "driver-upgrade.reboot-history"
	cases := []tc{
		// Upgrades.
		{name: "issue 18: upgrade, rollback, upgrade, then a fourth upgrade within the hour",
			labels: map[string]string{"reboot-required": "true", "driver-version": "25.6.0"},
			ann:    upgradeReq("25.7.0", map[string]string{H: hist("45;upgrade:25.5.0;ok", "30;upgrade:25.3.0;ok", "15;upgrade:25.6.0;pending")}),
			slot:   true, auto: true, want: Reboot, why: []string{"for upgrade to driver 25.7.0"},
			history: hist("45;upgrade:25.5.0;ok", "30;upgrade:25.3.0;ok", "15;upgrade:25.6.0;ok", "0;upgrade:25.7.0;pending")},
		{name: "successful upgrade reboots do not count",
			labels: map[string]string{"reboot-required": "true", "driver-version": "25.7.0"},
			ann:    upgradeReq("25.8.0", map[string]string{H: hist("50;upgrade:25.5.0;ok", "40;upgrade:25.3.0;ok", "30;upgrade:25.6.0;ok", "20;upgrade:25.7.0;ok")}),
			auto:   true, want: AcquireSlot},
		{name: "failed upgrade reboots count: the driver never loads its version",
			labels: map[string]string{"reboot-required": "true", "driver-version": "25.5.0"},
			ann:    upgradeReq("25.6.0", map[string]string{H: hist("40;upgrade:25.6.0;failed", "20;upgrade:25.6.0;failed", "10;upgrade:25.6.0;pending")}),
			auto:   true, want: Wait, cause: CauseBudget,
			why: []string{"refusing to reboot node npu-0 (reason=upgrade)", "3 reboots within 1h0m0s did not achieve their purpose",
				"upgrade to driver 25.6.0 at " + stamp(10) + " failed", reset}},
		{name: "two failed upgrade reboots leave one",
			labels: map[string]string{"reboot-required": "true", "driver-version": "25.5.0"},
			ann:    upgradeReq("25.6.0", map[string]string{H: hist("40;upgrade:25.5.0;ok", "20;upgrade:25.6.0;failed", "10;upgrade:25.6.0;pending")}),
			slot:   true, auto: true, want: Reboot,
			history: hist("40;upgrade:25.5.0;ok", "20;upgrade:25.6.0;failed", "10;upgrade:25.6.0;failed", "0;upgrade:25.6.0;pending")},
		{name: "failed reboots spread over more than the window are no loop",
			labels: map[string]string{"reboot-required": "true", "driver-version": "25.5.0"},
			ann:    upgradeReq("25.6.0", map[string]string{H: hist("130;upgrade:25.6.0;failed", "70;upgrade:25.6.0;failed", "10;upgrade:25.6.0;pending")}),
			auto:   true, want: AcquireSlot},
		{name: "an upgrade reboot without a recorded version counts",
			labels: map[string]string{"reboot-required": "true", "driver-version": "25.5.0"},
			ann:    map[string]string{"reboot-reason": "upgrade", H: hist("30;upgrade;failed", "20;upgrade;failed", "10;upgrade;pending")},
			auto:   true, want: Wait, cause: CauseBudget, why: []string{"3 reboots within 1h0m0s", "upgrade at " + stamp(10) + " failed"}},

		// Recoveries.
		{name: "successful recoveries do not count",
			labels: map[string]string{"reboot-required": "true", "driver-ready": "false"},
			ann:    recoveryReq(map[string]string{H: hist("50;recovery;ok", "40;recovery;ok", "30;recovery;ok")}),
			slot:   true, auto: true, want: Reboot,
			history: hist("50;recovery;ok", "40;recovery;ok", "30;recovery;ok", "0;recovery;pending")},
		{name: "sticky wedge: recovery reboots after which the wedge came back count",
			labels: map[string]string{"reboot-required": "true", "driver-ready": "false"},
			ann:    recoveryReq(map[string]string{H: hist("40;recovery;failed", "20;recovery;failed", "5;recovery;pending")}),
			auto:   true, want: Wait, cause: CauseBudget,
			why: []string{"(reason=recovery)", "3 reboots within 1h0m0s did not achieve their purpose", "recovery at " + stamp(40) + " failed", "recovery at " + stamp(5) + " failed", reset}},
		{name: "the pending recovery is judged failed by the new recovery request, even with a stale driver-ready=true",
			labels: map[string]string{"reboot-required": "true", "driver-ready": "true"},
			ann:    recoveryReq(map[string]string{H: hist("40;recovery;failed", "20;recovery;failed", "5;recovery;pending")}),
			auto:   true, want: Wait, cause: CauseBudget},
		{name: "a recovery after which the chips probe healthy is ok when an upgrade is requested next",
			labels: map[string]string{"reboot-required": "true", "driver-ready": "true", "driver-version": "25.5.0"},
			ann:    upgradeReq("25.6.0", map[string]string{H: hist("40;recovery;failed", "20;recovery;failed", "5;recovery;pending")}),
			slot:   true, auto: true, want: Reboot,
			history: hist("40;recovery;failed", "20;recovery;failed", "5;recovery;ok", "0;upgrade:25.6.0;pending")},
		{name: "a recovery whose chips never probed healthy fails when an upgrade is requested next",
			labels: map[string]string{"reboot-required": "true", "driver-ready": "false", "driver-version": "25.5.0"},
			ann:    upgradeReq("25.6.0", map[string]string{H: hist("40;recovery;failed", "20;recovery;failed", "5;recovery;pending")}),
			auto:   true, want: Wait, cause: CauseBudget},

		// Wedges that ended without a reboot (recorded by the health-watch).
		{name: "flapping chips: wedges withdrawn without a reboot count, the next request is refused",
			labels: map[string]string{"reboot-required": "true", "driver-ready": "false"},
			ann:    map[string]string{"reboot-reason": "recovery", H: hist("40;wedge;failed", "25;wedge;failed", "10;wedge;failed")},
			auto:   true, want: Wait, cause: CauseBudget,
			why: []string{"(reason=recovery)", "loop guard, 3 wedges within 1h0m0s", "wedge at " + stamp(40) + " ended without a reboot", "wedge at " + stamp(10) + " ended without a reboot", reset}},
		{name: "withdrawn wedges and failed recoveries count together",
			labels: map[string]string{"reboot-required": "true", "driver-ready": "false"},
			ann:    recoveryReq(map[string]string{H: hist("40;wedge;failed", "20;recovery;ok", "15;wedge;failed", "5;recovery;pending")}),
			auto:   true, want: Wait, cause: CauseBudget, why: []string{"loop guard, 1 reboot and 2 wedges within 1h0m0s", "recovery at " + stamp(5) + " failed", reset}},
		{name: "two withdrawn wedges leave one reboot",
			labels: map[string]string{"reboot-required": "true", "driver-ready": "false"},
			ann:    map[string]string{"reboot-reason": "recovery", H: hist("40;wedge;failed", "10;wedge;failed")},
			auto:   true, want: AcquireSlot},

		// The original format: times only, every entry counts.
		{name: "original format: three reboots within the hour refuse",
			labels: map[string]string{"reboot-required": "true", "driver-version": "25.5.0"},
			ann:    upgradeReq("25.6.0", map[string]string{H: hist("30", "20", "10")}),
			auto:   true, want: Wait, cause: CauseBudget, why: []string{"reboot of unrecorded purpose at " + stamp(30), reset}},
		{name: "original entries count beside new ones that achieved their purpose",
			labels: map[string]string{"reboot-required": "true", "driver-version": "25.5.0"},
			ann:    upgradeReq("25.6.0", map[string]string{H: hist("30", "20", "10;upgrade:25.5.0;pending")}),
			slot:   true, auto: true, want: Reboot,
			history: hist("30", "20", "10;upgrade:25.5.0;ok", "0;upgrade:25.6.0;pending")},
		{name: "original entries and a failed new one make a loop",
			labels: map[string]string{"reboot-required": "true", "driver-version": "25.3.0"},
			ann:    upgradeReq("25.5.0", map[string]string{H: hist("30", "20", "10;upgrade:25.5.0;pending")}),
			auto:   true, want: Wait, cause: CauseBudget},

		// Malformed history.
		{name: "malformed history refuses naming the node and the reset command",
			labels: map[string]string{"reboot-required": "true"},
			ann:    upgradeReq("25.6.0", map[string]string{H: hist("30") + ",garbage"}),
			auto:   true, want: Wait, cause: CauseBadHistory, why: []string{"refusing to reboot node npu-0", `"garbage" is not an RFC 3339 time`, reset}},
		{name: "malformed outcome refuses naming the node and the reset command",
			labels: map[string]string{"reboot-required": "true"},
			ann:    upgradeReq("25.6.0", map[string]string{H: hist("30;upgrade:25.5.0;done")}),
			auto:   true, want: Wait, cause: CauseBadHistory, why: []string{"refusing to reboot node npu-0", `outcome "done"`, reset}},
		{name: "malformed history with no reboot pending is left alone",
			labels: map[string]string{"driver-version": "25.5.0"},
			ann:    map[string]string{H: "garbage"}, want: Idle},

		// Settling past reboots with no reboot pending.
		{name: "settle: the upgrade reboot loaded its version",
			labels: map[string]string{"driver-version": "25.6.0"},
			ann:    map[string]string{H: hist("30;upgrade:25.5.0;ok", "10;upgrade:25.6.0;pending")},
			want:   Settle, why: []string{"reboot at " + stamp(10) + " (upgrade to driver 25.6.0) ok: driver 25.6.0 loaded", "does not count"},
			history: hist("30;upgrade:25.5.0;ok", "10;upgrade:25.6.0;ok")},
		{name: "settle: not while the old driver is still loaded",
			labels: map[string]string{"driver-version": "25.5.0"},
			ann:    map[string]string{H: hist("10;upgrade:25.6.0;pending")}, want: Idle},
		{name: "settle: the chips probe healthy after a recovery, before the uncordon",
			labels: map[string]string{"driver-ready": "true"},
			ann:    map[string]string{"driver-upgrade.recovery-cordoned": "true", H: hist("10;recovery;pending")},
			want:   Settle, why: []string{"(recovery) ok: the chips probe healthy"},
			history: hist("10;recovery;ok")},
		{name: "settle: not while the chips are not ready",
			labels: map[string]string{"driver-ready": "false"},
			ann:    map[string]string{"driver-upgrade.recovery-cordoned": "true", H: hist("10;recovery;pending")},
			want:   Wait, cause: CauseDriverReady},
		{name: "settle: nothing to judge in the original format",
			labels: map[string]string{"driver-version": "25.6.0", "driver-ready": "true"},
			ann:    map[string]string{H: hist("20", "10")}, want: Idle},
		{name: "settle: not during the reboot",
			labels: map[string]string{"reboot-required": "true", "driver-version": "25.6.0"},
			ann:    upgradeReq("25.6.0", map[string]string{"driver-upgrade.reboot-from-boot-id": "boot-1", H: hist("0;upgrade:25.6.0;pending")}),
			slot:   true, want: Reboot},
		{name: "settle: a stale slot goes back first",
			labels: map[string]string{"driver-version": "25.6.0"},
			ann:    map[string]string{H: hist("10;upgrade:25.6.0;pending")}, slot: true, want: ReleaseSlot},

		// What a reboot records.
		{name: "record: an upgrade without a target version",
			labels: map[string]string{"reboot-required": "true"},
			ann:    map[string]string{"reboot-reason": "upgrade"}, slot: true, auto: true, want: Reboot,
			history: hist("0;upgrade;pending")},
		{name: "record: an unusable target version is left out",
			labels: map[string]string{"reboot-required": "true"},
			ann:    upgradeReq("25.6.0;ok", nil), slot: true, auto: true, want: Reboot,
			history: hist("0;upgrade;pending")},
		{name: "record: a reboot of no reason",
			labels: map[string]string{"reboot-required": "true"},
			ann:    map[string]string{"approve-reboot": "true"}, slot: true, want: Reboot,
			history: hist("0;unspecified;pending")},
		{name: "record: a reboot of an unknown reason",
			labels: map[string]string{"reboot-required": "true"},
			ann:    map[string]string{"reboot-reason": "because, really", "approve-reboot": "true"}, slot: true, want: Reboot,
			history: hist("0;other;pending")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := policy()
			p.AutoUpgrade, p.AutoRecover = c.auto, c.auto
			f := facts(node(c.labels, c.ann))
			f.SlotHeld = c.slot
			got := Decide(f, p, now)
			if got.Kind != c.want || got.Cause != c.cause {
				t.Fatalf("Decide = %v (%s): %s\nwant %v (%s)", got.Kind, got.Cause, got.Why, c.want, c.cause)
			}
			for _, w := range c.why {
				if !strings.Contains(got.Why, w) {
					t.Errorf("Why = %q\nwant it to mention %q", got.Why, w)
				}
			}
			if c.history != "" && got.History.String() != c.history {
				t.Errorf("History = %q\nwant      %q", got.History.String(), c.history)
			}
			if c.want == Reboot && got.Record && c.history == "" {
				t.Errorf("a recorded reboot must be checked for its history entry (got %q)", got.History.String())
			}
		})
	}
}
