package reboot_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

// The rebooter together with the real health-watch and driver entry gate,
// all from the chart: a wedge is detected and reported by the watch, the
// rebooter carries out the recovery, the boot loads the installed driver,
// the gate records it and the watch reports it ready, which ends the
// recovery.

const jointDriver = "25.5.0"

// newJointFleet installs driver (entry gate + health-watch sidecar) and
// rebooter on fresh nodes and waits until every node is driver-ready.
func newJointFleet(t *testing.T, n int, edit func(rebooter, recovery, upgradePolicy map[string]any)) *fleet {
	t.Helper()
	f := newFleetWith(t, n, edit, func(vals map[string]any) {
		vals["driver"] = map[string]any{"enabled": true, "version": jointDriver, "upgradePolicy": vals["driver"].(map[string]any)["upgradePolicy"]}
		vals["healthWatch"] = map[string]any{"probeIntervalSeconds": 1, "probeTimeoutSeconds": 1, "failureThreshold": 2}
	})
	ctx := ctxTimeout(t, 3*time.Minute)
	for _, node := range f.nodes {
		// The nodes boot with an older driver loaded: the gate keeps it;
		// only the rollout's reboot, before which the gate installs
		// jointDriver on the drained node, loads jointDriver.
		waitNode(ctx, t, node.Name(), "driver ready", func(n *corev1.Node) bool {
			return n.Labels[keys.DriverReady()] == contract.True && n.Labels[keys.DriverVersion()] != ""
		})
	}
	return f
}

func healthWatchWedged(n *corev1.Node) bool {
	return n.Labels[keys.RebootRequired()] == contract.True && n.Annotations[keys.RebootReason()] == string(contract.ReasonRecovery) &&
		n.Labels[keys.DriverReady()] == contract.False
}

func TestJointManualRecovery(t *testing.T) {
	ctx := ctxTimeout(t, 5*time.Minute)
	f := newJointFleet(t, 1, nil)
	node := f.nodes[0]
	name := node.Name()
	before := bootID(t, name)

	if err := node.Host().Wedge(1); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, name, "wedge reported by the health-watch", healthWatchWedged)
	waitEvent(ctx, t, name, contract.EventChipWedged, "reason=recovery")
	waitEvent(ctx, t, name, contract.EventRebootRequired, "reason=recovery")
	waitEvent(ctx, t, name, contract.EventRebootPending, "waits for approval")
	if st := hostState(t, node); st.Reboots != 0 || st.RebootRequest != "" {
		t.Fatalf("rebooted without approval: %+v", st)
	}

	approve(t, name)
	waitNode(ctx, t, name, "rebooted, driver ready again, uncordoned", func(n *corev1.Node) bool {
		_, cordonMark := n.Annotations[keys.RecoveryCordoned()]
		_, approval := n.Annotations[keys.ApproveReboot()]
		return rebooted(before)(n) && n.Labels[keys.DriverReady()] == contract.True && !n.Spec.Unschedulable && !cordonMark && !approval
	})
	waitEvent(ctx, t, name, contract.EventRebootCompleted, "reason=recovery")
	// A recovery outside the rollout boots the driver installed on the
	// node: the new version is installed only on a node the rollout drained.
	if st := hostState(t, node); st.Reboots != 1 || st.LoadedDriver == jointDriver || st.LoadedDriver != st.InstalledDriver || st.Installs != 0 || len(st.Wedged) != 0 {
		t.Fatalf("after recovery: %+v; want one reboot, the installed (older) driver loaded by the boot, no install, no wedge", st)
	}
	if got := len(events(t, name, contract.EventRebootRequired)); got != 1 {
		t.Errorf("%d RebootRequired events, want the health-watch's one", got)
	}
}

func TestJointAutoRecoveryTwoSlotsFiveNodes(t *testing.T) {
	ctx := ctxTimeout(t, 6*time.Minute)
	f := newJointFleet(t, 5, func(r, rec, _ map[string]any) {
		r["slots"] = 2
		rec["autoRecover"], rec["maxWedgedNodes"] = true, "100%"
	})
	inv := watchInvariant(t, f)
	before := map[string]string{}
	for _, n := range f.nodes {
		before[n.Name()] = bootID(t, n.Name())
		if err := n.Host().Wedge(0); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range f.nodes {
		waitNode(ctx, t, n.Name(), "recovered", func(node *corev1.Node) bool {
			return rebooted(before[n.Name()])(node) && node.Labels[keys.DriverReady()] == contract.True && !node.Spec.Unschedulable
		})
	}
	for _, n := range f.nodes {
		if st := hostState(t, n); st.Reboots != 1 {
			t.Errorf("node %s rebooted %d times, want 1", n.Name(), st.Reboots)
		}
	}
	if inFlight, holders := inv.max(); inFlight > 2 || holders > 2 || inFlight == 0 {
		t.Fatalf("with 2 slots: %d nodes rebooting at once, %d slots held", inFlight, holders)
	}
}

func TestJointLoopGuardStopsAStickyWedge(t *testing.T) {
	ctx := ctxTimeout(t, 5*time.Minute)
	f := newJointFleet(t, 1, func(r, rec, _ map[string]any) {
		rec["autoRecover"] = true
		r["rebootBudget"] = map[string]any{"maxReboots": 2, "windowMinutes": 60}
	})
	node := f.nodes[0]
	name := node.Name()
	// A fault no reboot fixes: the watch reports it again after every boot.
	if err := node.Host().Update(func(st *simhost.State) error { st.StickyWedge = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := node.Host().Wedge(0); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(ctx, t, name, contract.EventRebootRefused, keys.RebootHistory()+"-")
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("RebootRefused is %s, want Warning", ev.Type)
	}
	if st := hostState(t, node); st.Reboots != 2 {
		t.Fatalf("host rebooted %d times, want the budget of 2", st.Reboots)
	}
	n := waitNode(ctx, t, name, "still wedged and cordoned", healthWatchWedged)
	if !n.Spec.Unschedulable {
		t.Error("a node refused by the loop guard was uncordoned while wedged")
	}
}
