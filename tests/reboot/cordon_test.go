package reboot_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// A recovery that starts while the driver upgrade holds the node's cordon
// (validation-required, cordoned by the rollout) and ends after the
// upgrade let go: the recovery copied the rollout's record (not cordoned
// by an admin), so it is the one that uncordons. Reading the cordon it
// saw as an admin's would leave the node cordoned for good.
func TestRecoveryThatOutlastsTheUpgradeUncordons(t *testing.T) {
	ctx := ctxTimeout(t, 3*time.Minute)
	f := newFleet(t, 1, func(_, rec, _ map[string]any) { rec["autoRecover"] = true })
	name := f.nodes[0].Name()
	holdInValidation(t, name)
	before := bootID(t, name)
	wedge(t, f.nodes[0])
	n := waitNode(ctx, t, name, "recovery reboot done, the recovery holding the cordon", func(n *corev1.Node) bool {
		return rebooted(before)(n) && n.Annotations[keys.RecoveryCordoned()] == contract.True
	})
	if v, ok := n.Annotations[keys.RecoveryWasCordoned()]; ok {
		t.Fatalf("%s=%s: the rollout's cordon was recorded as an admin's", keys.RecoveryWasCordoned(), v)
	}
	// The upgrade finishes first: the rollout removes its state and,
	// seeing the recovery hold the node, leaves the cordon to it.
	patch(t, name, kube.NodeChange{
		Labels:      map[string]*string{keys.UpgradeState(): nil},
		Annotations: map[string]*string{keys.UpgradeWasCordoned(): nil},
	})
	// The chips answer again: the recovery is over.
	patch(t, name, kube.NodeChange{Labels: map[string]*string{keys.DriverReady(): kube.Set(contract.True)}})
	waitNode(ctx, t, name, "uncordoned by the rebooter", func(n *corev1.Node) bool {
		_, held := n.Annotations[keys.RecoveryCordoned()]
		return !held && !n.Spec.Unschedulable
	})
}

// The other order: the recovery ends while the upgrade still holds the
// node; the rebooter lets go of its own hold and leaves the node cordoned
// for the rollout to uncordon when the upgrade is done.
func TestRecoveryEndingInsideTheUpgradeLeavesTheCordon(t *testing.T) {
	ctx := ctxTimeout(t, 3*time.Minute)
	f := newFleet(t, 1, func(_, rec, _ map[string]any) { rec["autoRecover"] = true })
	name := f.nodes[0].Name()
	holdInValidation(t, name)
	before := bootID(t, name)
	wedge(t, f.nodes[0])
	waitNode(ctx, t, name, "recovery reboot done", func(n *corev1.Node) bool {
		return rebooted(before)(n) && n.Annotations[keys.RecoveryCordoned()] == contract.True
	})
	patch(t, name, kube.NodeChange{Labels: map[string]*string{keys.DriverReady(): kube.Set(contract.True)}})
	n := waitNode(ctx, t, name, "the recovery let go", func(n *corev1.Node) bool {
		_, held := n.Annotations[keys.RecoveryCordoned()]
		return !held
	})
	if !n.Spec.Unschedulable {
		t.Fatal("the rebooter uncordoned a node the driver upgrade still holds")
	}
}

// holdInValidation puts node name where the rollout leaves a node it
// cordoned (no admin cordon before) and rebooted: validation-required.
func holdInValidation(t *testing.T, name string) {
	t.Helper()
	patch(t, name, kube.NodeChange{
		Labels:        map[string]*string{keys.UpgradeState(): kube.Set(string(contract.StateValidationRequired))},
		Annotations:   map[string]*string{keys.UpgradeWasCordoned(): kube.Set(contract.False)},
		Unschedulable: ptr.To(true),
	})
}
