package uninstall

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
)

var k = contract.Keys{Domain: contract.DefaultDomain}

func node(cordoned bool, labels, annotations map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels, Annotations: annotations},
		Spec:       corev1.NodeSpec{Unschedulable: cordoned},
	}
}

func TestPlanNodeUncordonsOnlyWhatNPUStackCordoned(t *testing.T) {
	state := func(s contract.UpgradeState) map[string]string { return map[string]string{k.UpgradeState(): string(s)} }
	wasCordoned := func(v string) map[string]string { return map[string]string{k.UpgradeWasCordoned(): v} }
	for _, tc := range []struct {
		name        string
		node        *corev1.Node
		uncordon    bool
		cordon      string // substring of NodePlan.Cordon
		note        string // substring of NodePlan.Note
		schedulable bool
	}{
		{name: "schedulable node", node: node(false, state(contract.StateDrainRequired), wasCordoned("false")), schedulable: true},
		{name: "cordoned by the admin, no npu-stack state", node: node(true, map[string]string{contract.LabelNPUPresent: "true"}, nil), cordon: "not cordoned by npu-stack"},
		{name: "cordoned by the rollout mid-upgrade", node: node(true, state(contract.StateDrainRequired), wasCordoned("false")), uncordon: true, cordon: "driver upgrade (npu.openfuyao.com/driver-upgrade-state=drain-required)"},
		{name: "cordoned by the rollout, record missing", node: node(true, state(contract.StateRebootRequired), nil), uncordon: true, cordon: "driver upgrade"},
		{name: "cordoned by the admin before the upgrade", node: node(true, state(contract.StateRebootRequired), wasCordoned("true")), cordon: "cordoned before the driver upgrade"},
		{name: "queued: the rollout has not cordoned", node: node(true, state(contract.StateUpgradeRequired), nil), cordon: "not cordoned by npu-stack"},
		{name: "cordon-required: the admin cordoned after the admission", node: node(true, state(contract.StateCordonRequired), wasCordoned("false")), cordon: "not cordoned by npu-stack"},
		{name: "uncordon-required: the rollout still holds", node: node(true, state(contract.StateUncordonRequired), wasCordoned("false")), uncordon: true},
		{name: "failed before the reboot: given back, the cordon is the admin's", node: node(true,
			state(contract.StateFailed), map[string]string{k.UpgradeWasCordoned(): "false", k.UpgradeFailureStep(): contract.StepDrain}), cordon: "not cordoned by npu-stack"},
		{name: "failed after the reboot: uncordoned with a warning", node: node(true,
			state(contract.StateFailed), map[string]string{k.UpgradeWasCordoned(): "false", k.UpgradeFailureStep(): "validation", k.UpgradeFailureReason(): "not valid"}),
			uncordon: true, note: `failed at step "validation" (not valid)`},
		{name: "a state this version does not know", node: node(true, map[string]string{k.UpgradeState(): "future-state"}, nil), uncordon: true},
		{name: "recovery cordon", node: node(true, nil, map[string]string{k.RecoveryCordoned(): "true"}), uncordon: true, cordon: "recovery reboot"},
		{name: "recovery cordon of an admin-cordoned node", node: node(true, nil,
			map[string]string{k.RecoveryCordoned(): "true", k.RecoveryWasCordoned(): "true"}), cordon: "cordoned before the recovery reboot"},
		{name: "recovery pending, not yet cordoned by it", node: node(true, map[string]string{k.RebootRequired(): "true"},
			map[string]string{k.RebootReason(): "recovery"}), cordon: "not cordoned by npu-stack"},
		{name: "both hold; only the upgrade's record says admin", node: node(true, state(contract.StateRebootRequired),
			map[string]string{k.UpgradeWasCordoned(): "true", k.RecoveryCordoned(): "true"}), uncordon: true, cordon: "and a recovery reboot"},
		{name: "both hold, both records say admin", node: node(true, state(contract.StateRebootRequired),
			map[string]string{k.UpgradeWasCordoned(): "true", k.RecoveryCordoned(): "true", k.RecoveryWasCordoned(): "true"}), cordon: "cordoned before"},
		{name: "cordon-required held by a recovery it took from no admin", node: node(true, state(contract.StateCordonRequired),
			map[string]string{k.UpgradeWasCordoned(): "true", k.RecoveryCordoned(): "true"}), uncordon: true, cordon: "recovery reboot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanNode(k, tc.node)
			if p.Uncordon != tc.uncordon {
				t.Errorf("uncordon %v, want %v (%s)", p.Uncordon, tc.uncordon, p.Cordon)
			}
			if tc.schedulable != (p.Cordon == "") || !strings.Contains(p.Cordon, tc.cordon) {
				t.Errorf("cordon %q, want it to contain %q", p.Cordon, tc.cordon)
			}
			if tc.note == "" && p.Note != "" || !strings.Contains(p.Note, tc.note) {
				t.Errorf("note %q, want %q", p.Note, tc.note)
			}
			if got := p.Change().Unschedulable; (got != nil) != tc.uncordon || got != nil && *got {
				t.Errorf("patch unschedulable %v, want a change to false only when uncordoning", got)
			}
		})
	}
}

func TestPlanNodeRemovesEveryKeyOfItsDomainOnly(t *testing.T) {
	n := node(false, map[string]string{
		k.UpgradeState(): "drain-required", k.DriverVersion(): "25.5.0", k.UpgradeSkip(): "true", "npu.openfuyao.com/from-a-newer-version": "x",
		contract.LabelNPUPresent: "true", contract.LabelChip: "910b", "npu.example.com/driver-version": "1",
	}, map[string]string{
		k.UpgradeWasCordoned(): "false", k.ApproveReboot(): "true", k.DriverVersion(): "25.5.0",
		"node.alpha.kubernetes.io/ttl": "0", "npu.openfuyao.com.evil/x": "y",
	})
	p := PlanNode(k, n)
	wantLabels := []string{"npu.openfuyao.com/driver-upgrade-state", "npu.openfuyao.com/driver-upgrade.skip", "npu.openfuyao.com/driver-version", "npu.openfuyao.com/from-a-newer-version"}
	wantAnnotations := []string{"npu.openfuyao.com/approve-reboot", "npu.openfuyao.com/driver-upgrade.was-cordoned", "npu.openfuyao.com/driver-version"}
	if !slices.Equal(p.Labels, wantLabels) || !slices.Equal(p.Annotations, wantAnnotations) {
		t.Errorf("labels %q annotations %q, want %q and %q", p.Labels, p.Annotations, wantLabels, wantAnnotations)
	}
	c := p.Change()
	if c.Unschedulable != nil || len(c.Labels) != len(wantLabels) || len(c.Annotations) != len(wantAnnotations) {
		t.Errorf("patch %+v changes more than the keys", c)
	}
	for _, v := range c.Labels {
		if v != nil {
			t.Errorf("patch sets a label instead of removing it: %+v", c.Labels)
		}
	}
	other := PlanNode(contract.Keys{Domain: "npu.example.com"}, n)
	if !slices.Equal(other.Labels, []string{"npu.example.com/driver-version"}) || len(other.Annotations) != 0 {
		t.Errorf("domain npu.example.com: labels %q annotations %q", other.Labels, other.Annotations)
	}
	if clean := PlanNode(k, node(false, map[string]string{contract.LabelNPUPresent: "true"}, nil)); !clean.Empty() {
		t.Errorf("a node without npu-stack keys gets a write: %+v", clean)
	}
}
