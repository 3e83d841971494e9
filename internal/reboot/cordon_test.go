package reboot

import (
	corev1 "k8s.io/api/core/v1"

	"testing"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// The recovery's cordon next to the rollout's: the recovery records
// whether an admin had cordoned the node (copying the rollout's record
// when the rollout holds it) and lets go without uncordoning while the
// rollout still holds the node.
func TestRecoveryCordonOwners(t *testing.T) {
	slot := func(f Facts) Facts { f.SlotHeld = true; return f }
	cordoned := func(f Facts) Facts { f.Node.Spec.Unschedulable = true; return f }
	for _, tc := range []struct {
		name        string
		facts       Facts
		kind        Kind
		admin, keep bool
	}{
		{name: "schedulable node: recovery cordons, not an admin's", facts: slot(facts(pending("recovery"))), kind: Cordon},
		{name: "node cordoned by an admin", facts: cordoned(slot(facts(pending("recovery")))), kind: Cordon, admin: true},
		{name: "node cordoned by the rollout: the rollout's record counts", kind: Cordon,
			facts: cordoned(slot(facts(withLabel(pending("recovery", "driver-upgrade.was-cordoned", "false"), "driver-upgrade-state", "validation-required"))))},
		{name: "node the rollout holds, cordoned by an admin before", kind: Cordon, admin: true,
			facts: cordoned(slot(facts(withLabel(pending("recovery", "driver-upgrade.was-cordoned", "true"), "driver-upgrade-state", "uncordon-required"))))},
		{name: "recovery over: uncordon", kind: Uncordon,
			facts: facts(node(map[string]string{"driver-ready": "true"}, map[string]string{"driver-upgrade.recovery-cordoned": "true"}))},
		{name: "recovery over, admin had cordoned: keep", kind: Uncordon, keep: true,
			facts: facts(node(map[string]string{"driver-ready": "true"}, map[string]string{"driver-upgrade.recovery-cordoned": "true", "driver-upgrade.recovery-was-cordoned": "true"}))},
		{name: "recovery over, the rollout still holds the node: keep", kind: Uncordon, keep: true,
			facts: facts(node(map[string]string{"driver-ready": "true", "driver-upgrade-state": "validation-required"}, map[string]string{"driver-upgrade.recovery-cordoned": "true"}))},
		{name: "recovery over, the rollout failed after the reboot: keep", kind: Uncordon, keep: true,
			facts: facts(node(map[string]string{"driver-ready": "true", "driver-upgrade-state": "upgrade-failed"},
				map[string]string{"driver-upgrade.recovery-cordoned": "true", "driver-upgrade.failure-step": "validation"}))},
		{name: "recovery over, the rollout gave the node back after an early failure: uncordon", kind: Uncordon,
			facts: facts(node(map[string]string{"driver-ready": "true", "driver-upgrade-state": "upgrade-failed"},
				map[string]string{"driver-upgrade.recovery-cordoned": "true", "driver-upgrade.failure-step": contract.StepPodDeletion}))},
		{name: "queued upgrade holds no cordon: uncordon", kind: Uncordon,
			facts: facts(node(map[string]string{"driver-ready": "true", "driver-upgrade-state": "upgrade-required"}, map[string]string{"driver-upgrade.recovery-cordoned": "true"}))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := policy()
			p.AutoRecover = true
			a := Decide(tc.facts, p, now)
			if a.Kind != tc.kind || a.AdminCordoned != tc.admin || a.KeepCordoned != tc.keep {
				t.Fatalf("got %v admin=%t keep=%t (%s); want %v admin=%t keep=%t", a.Kind, a.AdminCordoned, a.KeepCordoned, a.Why, tc.kind, tc.admin, tc.keep)
			}
		})
	}
}

func withLabel(n *corev1.Node, key, value string) *corev1.Node {
	n.Labels[keys.Domain+"/"+key] = value
	return n
}
