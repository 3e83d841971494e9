package rollout

import (
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/internal/contract"
)

func approved(n *NodeView) { n.Approved, n.ApprovalValue = true, contract.True }

func recoveryRequest(n *NodeView) {
	n.RebootRequired, n.RebootReason = true, string(contract.ReasonRecovery)
}

// holds sets the cordon's owners as the view reads them from the node.
func holds(c contract.CordonOwners) func(*NodeView) { return func(n *NodeView) { n.Cordon = c } }

// change finds the action on node and returns it.
func actionOn(t *testing.T, d Decision, node string) Action {
	t.Helper()
	for _, a := range d.Actions {
		if a.Node == node {
			return a
		}
	}
	t.Fatalf("no action on %s (waiting %v)", node, d.Waiting)
	return Action{}
}

func annotationRemoved(a Action, key string) bool {
	v, ok := a.Change.Annotations[key]
	return ok && v == nil
}

func annotationSet(a Action, key string) string {
	if v := a.Change.Annotations[key]; v != nil {
		return *v
	}
	return ""
}

// An approval authorises the reboot request pending when it is used; one
// left when a node needs no upgrade reboot is removed, so that it cannot
// authorise a later recovery reboot.
func TestStaleApprovals(t *testing.T) {
	p := policy()
	for _, tc := range []struct {
		name    string
		node    NodeView
		move    string
		removed bool
	}{
		{name: "up-to-date node hit by the bulk approval", node: nv("a", loaded("2.0"), approved), move: "a:done>done", removed: true},
		{name: "an invalid value goes too", node: nv("a", loaded("2.0"), func(n *NodeView) { n.ApprovalValue = "yes" }), move: "a:done>done", removed: true},
		{name: "skipped node", node: nv("a", skip, approved), move: "a:done>done", removed: true},
		{name: "skipped while queued", node: nv("a", skip, approved, in(contract.StateUpgradeRequired)), move: "a:upgrade-required>upgrade-required", removed: true},
		{name: "up-to-date node with a recovery pending: the approval is the recovery's", node: nv("a", loaded("2.0"), approved, recoveryRequest)},
		{name: "queued node keeps its approval for its upgrade", node: nv("a", approved, in(contract.StateUpgradeRequired), func(n *NodeView) { n.Ready = false })},
		{name: "upgrade done without using it", node: nv("a", loaded("2.0"), approved, in(contract.StateUncordonRequired), cordoned, wasCordoned(false),
			holds(contract.CordonOwners{Upgrade: true})), move: "a:uncordon-required>done", removed: true},
		{name: "upgrade done with a recovery pending: kept for the recovery", node: nv("a", loaded("2.0"), approved, recoveryRequest, in(contract.StateUncordonRequired),
			cordoned, wasCordoned(false), holds(contract.CordonOwners{Upgrade: true})), move: "a:uncordon-required>done"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(p, tc.node)
			if tc.move == "" {
				want(t, d)
				return
			}
			want(t, d, tc.move)
			a := actionOn(t, d, "a")
			if got := annotationRemoved(a, keys.ApproveReboot()); got != tc.removed {
				t.Fatalf("approval removed = %t, want %t", got, tc.removed)
			}
			if tc.removed && (len(a.Events) == 0 || a.Events[len(a.Events)-1].Reason != contract.EventApprovalRemoved) {
				t.Fatalf("no %s event: %+v", contract.EventApprovalRemoved, a.Events)
			}
		})
	}
}

// Exactly one reboot per request: once the rebooter recorded that it
// completed the reboot of the boot the rollout asked to leave, the
// rollout waits for the kubelet's new boot ID instead of asking again.
func TestBootIDLag(t *testing.T) {
	p := policy()
	inReboot := func(n *NodeView) {
		n.State, n.RawState, n.UpgradeBootID, n.Unschedulable = contract.StateRebootRequired, string(contract.StateRebootRequired), "boot-a", true
	}
	for _, tc := range []struct {
		name string
		edit func(*NodeView)
		move string
		wait string
	}{
		{name: "rebooter done, kubelet lags: wait", edit: func(n *NodeView) { n.RebootedFrom = "boot-a" }, wait: "waiting for the kubelet"},
		{name: "kubelet first: validate", edit: func(n *NodeView) { n.RebootedFrom, n.BootID = "boot-a", "boot-b" }, move: "a:reboot-required>validation-required"},
		{name: "removed before the reboot: ask again", edit: func(*NodeView) {}, move: "a:reboot-required>reboot-required"},
		{name: "an earlier reboot's record: ask again", edit: func(n *NodeView) { n.RebootedFrom = "boot-0" }, move: "a:reboot-required>reboot-required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(p, nv("a", inReboot, tc.edit))
			if tc.move == "" {
				want(t, d)
				if !strings.Contains(d.Waiting["a"], tc.wait) {
					t.Fatalf("waiting %q, want %q", d.Waiting["a"], tc.wait)
				}
				return
			}
			want(t, d, tc.move)
		})
	}
	// A rollback while the kubelet lags: the node did reboot, so it is
	// validated, not given back as if it had not.
	d := decide(p, nv("a", inReboot, loaded("2.0"), func(n *NodeView) { n.RebootedFrom = "boot-a" }))
	if strings.Contains(strings.Join(moves(d), " "), "uncordon-required") {
		t.Fatalf("a rebooted node was given back without validation: %v", moves(d))
	}
}

// One owner of each cordon: the rollout neither uncordons a node a
// recovery holds or waits for nor turns a recovery request into an
// upgrade one.
func TestCordonOwners(t *testing.T) {
	p := policy(func(p *Policy) { p.AutoUpgrade = true })
	upgradeOnly := holds(contract.CordonOwners{Upgrade: true})
	t.Run("admitted while a recovery holds the cordon: not an admin's", func(t *testing.T) {
		for _, admin := range []bool{false, true} {
			d := decide(p, nv("a", in(contract.StateUpgradeRequired), cordoned, holds(contract.CordonOwners{Recovery: true, ByAdmin: admin})))
			a := actionOn(t, d, "a")
			if got, want := annotationSet(a, keys.UpgradeWasCordoned()), boolString(admin); a.To != contract.StateCordonRequired || got != want {
				t.Fatalf("admin=%t: to %s, was-cordoned = %q, want cordon-required and %q", admin, a.To, got, want)
			}
		}
	})
	t.Run("recovery cordoned first: the rollout's record is the recovery's", func(t *testing.T) {
		d := decide(p, nv("a", in(contract.StateCordonRequired), cordoned, wasCordoned(true), holds(contract.CordonOwners{Upgrade: true, Recovery: true})))
		a := actionOn(t, d, "a")
		if got := annotationSet(a, keys.UpgradeWasCordoned()); got != contract.False {
			t.Fatalf("was-cordoned = %q, want false: the recovery, not an admin, cordoned it", got)
		}
	})
	t.Run("done while a recovery holds the cordon: stays cordoned", func(t *testing.T) {
		d := decide(p, nv("a", loaded("2.0"), in(contract.StateUncordonRequired), cordoned, wasCordoned(false), holds(contract.CordonOwners{Upgrade: true, Recovery: true})))
		a := actionOn(t, d, "a")
		if a.Change.Unschedulable != nil {
			t.Fatalf("unschedulable changed to %t while a recovery holds the node", *a.Change.Unschedulable)
		}
	})
	t.Run("done while a recovery waits: cordon handed over", func(t *testing.T) {
		d := decide(p, nv("a", loaded("2.0"), in(contract.StateUncordonRequired), cordoned, wasCordoned(false), upgradeOnly, recoveryRequest))
		a := actionOn(t, d, "a")
		if a.Change.Unschedulable != nil || annotationSet(a, keys.RecoveryCordoned()) != contract.True || !annotationRemoved(a, keys.RecoveryWasCordoned()) {
			t.Fatalf("want the cordon handed over to the recovery (not an admin's): %+v", a.Change)
		}
		if _, touched := a.Change.Labels[keys.RebootRequired()]; touched {
			t.Fatal("the recovery request must stay")
		}
	})
	t.Run("done, admin had cordoned, recovery waits: handed over as an admin's", func(t *testing.T) {
		d := decide(p, nv("a", loaded("2.0"), in(contract.StateUncordonRequired), cordoned, wasCordoned(true),
			holds(contract.CordonOwners{Upgrade: true, ByAdmin: true}), recoveryRequest))
		if got := annotationSet(actionOn(t, d, "a"), keys.RecoveryWasCordoned()); got != contract.True {
			t.Fatalf("recovery-was-cordoned = %q, want true", got)
		}
	})
	t.Run("done, nobody else holds it: uncordoned", func(t *testing.T) {
		d := decide(p, nv("a", loaded("2.0"), in(contract.StateUncordonRequired), cordoned, wasCordoned(false), upgradeOnly))
		if a := actionOn(t, d, "a"); a.Change.Unschedulable == nil || *a.Change.Unschedulable {
			t.Fatal("not uncordoned")
		}
	})
	t.Run("early failure while a recovery waits: not uncordoned", func(t *testing.T) {
		a := builder{k: keys, now: now}.fail(nv("a", in(contract.StatePodDeletionRequired), cordoned, wasCordoned(false), upgradeOnly, recoveryRequest), StepPodDeletion, "boom")
		if a.Change.Unschedulable != nil || annotationSet(a, keys.RecoveryCordoned()) != contract.True {
			t.Fatalf("want the cordon handed over: %+v", a.Change)
		}
	})
	t.Run("reboot step with a recovery pending: reason stays recovery", func(t *testing.T) {
		d := decide(p, nv("a", in(contract.StateDrainRequired), cordoned, wasCordoned(false), upgradeOnly, recoveryRequest))
		a := actionOn(t, d, "a")
		if a.To != contract.StateRebootRequired {
			t.Fatalf("to %s, want reboot-required", a.To)
		}
		if _, ok := a.Change.Annotations[keys.RebootReason()]; ok {
			t.Fatalf("reboot-reason overwritten: %q", annotationSet(a, keys.RebootReason()))
		}
		if _, ok := a.Change.Labels[keys.RebootRequired()]; ok {
			t.Fatal("reboot-required rewritten")
		}
		if annotationSet(a, keys.UpgradeBootID()) != "boot-a" {
			t.Fatal("the boot to leave must be recorded")
		}
		d = decide(p, nv("a", in(contract.StateRebootRequired), cordoned, upgradeOnly, recoveryRequest, func(n *NodeView) { n.UpgradeBootID = "boot-a" }))
		want(t, d)
		if !strings.Contains(d.Waiting["a"], "recovery reboot (reason=recovery) is pending") {
			t.Fatalf("waiting %q", d.Waiting["a"])
		}
	})
}

// An upgrade abandoned before its reboot (the driver disabled, the
// profile removed) withdraws its request and with it the approval given
// for it; a recovery request pending keeps both.
func TestAbandonedUpgradeDropsItsApproval(t *testing.T) {
	b := builder{k: keys, now: now}
	waiting := func(reason contract.RebootReason) func(*NodeView) {
		return func(n *NodeView) {
			n.State, n.RawState, n.UpgradeBootID = contract.StateRebootRequired, string(contract.StateRebootRequired), "boot-a"
			n.RebootRequired, n.RebootReason = true, string(reason)
		}
	}
	a := abandon(b, nv("a", waiting(contract.ReasonUpgrade), approved, cordoned, wasCordoned(false)), "profile removed")
	if !annotationRemoved(a, keys.ApproveReboot()) {
		t.Fatalf("approval kept after the upgrade's request was withdrawn: %+v", a.Change)
	}
	a = abandon(b, nv("a", waiting(contract.ReasonRecovery), approved, cordoned, wasCordoned(false)), "profile removed")
	if _, touched := a.Change.Annotations[keys.ApproveReboot()]; touched {
		t.Fatal("the approval of a pending recovery request was removed")
	}
}
