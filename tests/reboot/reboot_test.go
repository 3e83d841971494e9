package reboot_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/slots"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// pod runs a simulated container bound to node; npu makes it request an
// NPU (huawei.com/Ascend910).
func pod(t *testing.T, ns, name, node string, npu bool) *corev1.Pod {
	t.Helper()
	c := corev1.Container{Name: "work", Image: env.Product.PauseImage}
	if npu {
		c.Resources.Limits = corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("1")}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{c}, TerminationGracePeriodSeconds: ptr.To[int64](1)},
	}
	p, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = testbed.WaitFor(ctxTimeout(t, time.Minute), testbed.PodsLW(env.Client, ns, "app="+name), &corev1.Pod{}, func(ps []*corev1.Pod) (bool, error) {
		return len(ps) == 1 && ps[0].Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod %s not running: %v", name, err)
	}
	return p
}

func TestManualRecoveryRebootsOnceAfterApproval(t *testing.T) {
	ctx := ctxTimeout(t, 4*time.Minute)
	f := newFleet(t, 1, nil)
	node := f.nodes[0]
	name := node.Name()
	npuPod := pod(t, f.ns, "npu-job", name, true)
	cpuPod := pod(t, f.ns, "cpu-job", name, false)
	before := bootID(t, name)

	wedge(t, node)
	waitEvent(ctx, t, name, contract.EventRebootRequired, "reason=recovery")
	waitEvent(ctx, t, name, contract.EventRebootPending, keys.ApproveReboot()+"=true")
	if st := hostState(t, node); st.Reboots != 0 || st.RebootRequest != "" {
		t.Fatalf("rebooted without approval: %+v", st)
	}

	approve(t, name)
	after := waitNode(ctx, t, name, "reboot and clear the marker", rebooted(before))
	if !after.Spec.Unschedulable || after.Annotations[keys.RecoveryCordoned()] != contract.True {
		t.Fatalf("node not kept cordoned until the driver is ready: unschedulable %v, annotations %v", after.Spec.Unschedulable, after.Annotations)
	}
	if _, ok := after.Annotations[keys.ApproveReboot()]; ok {
		t.Fatal("approval not consumed")
	}
	if after.Annotations[keys.RebootHistory()] == "" {
		t.Fatal("reboot not counted in the budget annotation")
	}
	if _, err := env.Client.CoreV1().Pods(f.ns).Get(ctx, npuPod.Name, metav1.GetOptions{}); err == nil {
		t.Error("the NPU pod was not evicted")
	}
	if p, err := env.Client.CoreV1().Pods(f.ns).Get(ctx, cpuPod.Name, metav1.GetOptions{}); err != nil || p.UID != cpuPod.UID {
		t.Errorf("the non-NPU pod was evicted: %v", err)
	}
	waitEvent(ctx, t, name, contract.EventRebootCompleted, "reason=recovery")

	// The health-watch reports the driver ready again after boot.
	patch(t, name, kube.NodeChange{Labels: map[string]*string{keys.DriverReady(): kube.Set(contract.True)}})
	waitNode(ctx, t, name, "uncordon once driver-ready=true", func(n *corev1.Node) bool {
		_, cordonMark := n.Annotations[keys.RecoveryCordoned()]
		return !n.Spec.Unschedulable && !cordonMark
	})
	if st := hostState(t, node); st.Reboots != 1 {
		t.Fatalf("host rebooted %d times, want exactly 1", st.Reboots)
	}
	if got := len(events(t, name, contract.EventRebootRequired)); got != 1 {
		t.Errorf("%d RebootRequired events, want one per pending reboot", got)
	}
}

func TestRecoveryKeepsANodeCordonedBeforehandCordoned(t *testing.T) {
	ctx := ctxTimeout(t, 3*time.Minute)
	f := newFleet(t, 1, func(r, rec, _ map[string]any) { rec["autoRecover"] = true })
	name := f.nodes[0].Name()
	patch(t, name, kube.NodeChange{Unschedulable: ptr.To(true)})
	before := bootID(t, name)
	wedge(t, f.nodes[0])
	waitNode(ctx, t, name, "reboot", rebooted(before))
	patch(t, name, kube.NodeChange{Labels: map[string]*string{keys.DriverReady(): kube.Set(contract.True)}})
	n := waitNode(ctx, t, name, "recovery bookkeeping cleared", func(n *corev1.Node) bool {
		_, a := n.Annotations[keys.RecoveryCordoned()]
		_, b := n.Annotations[keys.RecoveryWasCordoned()]
		return !a && !b
	})
	if !n.Spec.Unschedulable {
		t.Fatal("a node cordoned by the admin before the recovery was uncordoned")
	}
}

func TestAutoRecoveryNeverExceedsSlots(t *testing.T) {
	ctx := ctxTimeout(t, 5*time.Minute)
	f := newFleet(t, 5, func(r, rec, _ map[string]any) {
		r["slots"] = 2
		rec["autoRecover"], rec["maxWedgedNodes"] = true, 5
	})
	inv := watchInvariant(t, f)
	before := map[string]string{}
	for _, n := range f.nodes {
		before[n.Name()] = bootID(t, n.Name())
	}
	for _, n := range f.nodes {
		wedge(t, n)
	}
	for _, n := range f.nodes {
		waitNode(ctx, t, n.Name(), "auto-recovery reboot", rebooted(before[n.Name()]))
	}
	for _, n := range f.nodes {
		if st := hostState(t, n); st.Reboots != 1 {
			t.Errorf("node %s rebooted %d times, want 1", n.Name(), st.Reboots)
		}
	}
	inFlight, holders := inv.max()
	if inFlight > 2 || holders > 2 {
		t.Fatalf("with 2 slots, %d nodes rebooted at once and %d slots were held", inFlight, holders)
	}
	if inFlight == 0 || holders == 0 {
		t.Fatalf("the invariant watch saw nothing (in flight %d, holders %d)", inFlight, holders)
	}
}

func TestStormProtectionPausesAutoRecovery(t *testing.T) {
	ctx := ctxTimeout(t, 4*time.Minute)
	// Five nodes wedge before any rebooter looks: a storm in full, not
	// one building up (whose first nodes would rightly be rebooted).
	f := newFleetThen(t, 5, func(r, rec, _ map[string]any) {
		r["slots"] = 5
		rec["autoRecover"], rec["maxWedgedNodes"] = true, "40%" // 2 of 5
	}, func(f *fleet) {
		for _, n := range f.nodes {
			wedge(t, n)
		}
	})
	for _, n := range f.nodes {
		waitEvent(ctx, t, n.Name(), contract.EventRecoveryPaused, "5 of 5 NPU nodes")
	}
	for _, n := range f.nodes {
		if st := hostState(t, n); st.Reboots != 0 || st.RebootRequest != "" {
			t.Fatalf("node %s rebooted during a storm: %+v", n.Name(), st)
		}
	}
	first := f.nodes[0].Name()
	before := bootID(t, first)
	approve(t, first)
	waitNode(ctx, t, first, "manually approved reboot during a storm", rebooted(before))
	if st := hostState(t, f.nodes[0]); st.Reboots != 1 {
		t.Fatalf("approved node rebooted %d times", st.Reboots)
	}
	for _, n := range f.nodes[1:] {
		if st := hostState(t, n); st.Reboots != 0 {
			t.Fatalf("node %s rebooted during a storm without approval", n.Name())
		}
	}
}

func TestUpgradeRebootNeedsApprovalAndUsesAnEarlyOneOnce(t *testing.T) {
	ctx := ctxTimeout(t, 4*time.Minute)
	f := newFleet(t, 1, nil)
	inv := watchInvariant(t, f)
	node := f.nodes[0]
	name := node.Name()

	before := bootID(t, name)
	requestReboot(t, name, contract.ReasonUpgrade)
	waitEvent(ctx, t, name, contract.EventRebootRequired, "reason=upgrade")
	waitEvent(ctx, t, name, contract.EventRebootPending, "waits for approval")
	if st := hostState(t, node); st.Reboots != 0 {
		t.Fatal("upgrade reboot without approval")
	}
	approve(t, name)
	after := waitNode(ctx, t, name, "approved upgrade reboot", rebooted(before))
	if after.Spec.Unschedulable {
		t.Fatal("the rebooter cordoned for an upgrade; the rollout owns that")
	}
	if inv.annotation(name, keys.RebootStartedAt()) == "" {
		t.Fatal("RebootStartedAt was never written; the rollout times the reboot from it")
	}

	// An approval given before the need is kept, then used once.
	approve(t, name)
	before = after.Status.NodeInfo.BootID
	requestReboot(t, name, contract.ReasonUpgrade)
	after = waitNode(ctx, t, name, "reboot with the early approval", rebooted(before))
	if _, ok := after.Annotations[keys.ApproveReboot()]; ok {
		t.Fatal("early approval not consumed")
	}
	if st := hostState(t, node); st.Reboots != 2 {
		t.Fatalf("host rebooted %d times, want 2", st.Reboots)
	}
	// And it is gone: the next request waits again.
	requestReboot(t, name, contract.ReasonUpgrade)
	waitEvent(ctx, t, name, contract.EventRebootPending, "waits for approval")
	if st := hostState(t, node); st.Reboots != 2 {
		t.Fatal("a consumed approval authorised another reboot")
	}
}

func TestAutoUpgradeRebootsWithoutApproval(t *testing.T) {
	ctx := ctxTimeout(t, 3*time.Minute)
	f := newFleet(t, 1, func(_, _, up map[string]any) { up["autoUpgrade"] = true })
	name := f.nodes[0].Name()
	before := bootID(t, name)
	requestReboot(t, name, contract.ReasonUpgrade)
	waitNode(ctx, t, name, "auto-upgrade reboot", rebooted(before))
	waitEvent(ctx, t, name, contract.EventRebootCompleted, "reason=upgrade")
	if st := hostState(t, f.nodes[0]); st.Reboots != 1 {
		t.Fatalf("host rebooted %d times", st.Reboots)
	}
}

func TestLoopGuardRefusesAfterTheBudget(t *testing.T) {
	ctx := ctxTimeout(t, 5*time.Minute)
	f := newFleet(t, 1, func(r, rec, _ map[string]any) {
		rec["autoRecover"] = true
		r["rebootBudget"] = map[string]any{"maxReboots": 2, "windowMinutes": 60}
	})
	node := f.nodes[0]
	name := node.Name()
	if err := node.Host().Update(func(st *simhost.State) error { st.StickyWedge = true; return nil }); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		before := bootID(t, name)
		wedge(t, node) // wedged again right after every boot
		waitNode(ctx, t, name, fmt.Sprintf("recovery reboot %d", i+1), rebooted(before))
	}
	wedge(t, node)
	ev := waitEvent(ctx, t, name, contract.EventRebootRefused, "kubectl annotate node "+name+" "+keys.RebootHistory()+"-")
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("RebootRefused is %s, want Warning", ev.Type)
	}
	if st := hostState(t, node); st.Reboots != 2 {
		t.Fatalf("host rebooted %d times, want the budget of 2", st.Reboots)
	}
	// The admin clears the history: the guard lets the next reboot through.
	before := bootID(t, name)
	patch(t, name, kube.NodeChange{Annotations: map[string]*string{keys.RebootHistory(): nil}})
	waitNode(ctx, t, name, "reboot after the budget reset", rebooted(before))
	if st := hostState(t, node); st.Reboots != 3 {
		t.Fatalf("host rebooted %d times after the reset, want 3", st.Reboots)
	}
}

func TestSlotOfAHolderThatNeverReturnsExpires(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 5*time.Minute)
	f := newFleet(t, 2, func(r, rec, _ map[string]any) {
		r["slotTTLSeconds"] = 60
		rec["autoRecover"] = true
	})
	stuck, next := f.nodes[0], f.nodes[1]
	// A finalizer keeps the NPU pod from going away, so the holder stays
	// in its pod removal with the slot, and is killed there. (The
	// rebooter deletes its node's pods without consulting budgets: a
	// wedged node's chips are gone anyway.)
	pod(t, f.ns, "guarded", stuck.Name(), true)
	const hold = "test.npu-stack.openfuyao.com/hold"
	if _, err := env.Client.CoreV1().Pods(f.ns).Patch(ctx, "guarded", types.MergePatchType, []byte(`{"metadata":{"finalizers":["`+hold+`"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = env.Client.CoreV1().Pods(f.ns).Patch(context.Background(), "guarded", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	wedge(t, stuck)
	waitNode(ctx, t, stuck.Name(), "cordoned for recovery (slot held, evicting)", func(n *corev1.Node) bool {
		return n.Annotations[keys.RecoveryCordoned()] == contract.True
	})
	lease, err := env.Client.CoordinationV1().Leases(f.ns).Get(ctx, slots.Name(0), metav1.GetOptions{})
	if err != nil || ptr.Deref(lease.Spec.HolderIdentity, "") != stuck.Name() {
		t.Fatalf("slot 0 not held by %s: %v %+v", stuck.Name(), err, lease)
	}
	stuck.Stop() // the machine dies mid-recovery and never comes back

	before := bootID(t, next.Name())
	wedge(t, next)
	waitEvent(ctx, t, next.Name(), contract.EventRebootPending, "waits for a reboot slot")
	waitNode(ctx, t, next.Name(), "reboot once the dead holder's slot expired", rebooted(before))
	if expiry := slots.Expiry(lease); time.Now().Before(expiry) {
		t.Fatalf("next node rebooted before the slot's TTL ran out (%s)", expiry)
	}
	if st := hostState(t, stuck); st.Reboots != 0 {
		t.Fatal("the stuck node rebooted")
	}
}

func TestSlotOfANodeLostInItsRebootExpires(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 5*time.Minute)
	f := newFleet(t, 2, func(r, rec, _ map[string]any) {
		r["slotTTLSeconds"] = 60
		rec["autoRecover"] = true
	})
	lost, next := f.nodes[0], f.nodes[1]
	lost.LoseOnReboot() // goes down for the reboot and never boots again
	wedge(t, lost)
	waitNode(ctx, t, lost.Name(), "reboot recorded", func(n *corev1.Node) bool { return n.Annotations[keys.RebootFromBootID()] != "" })
	before := bootID(t, next.Name())
	wedge(t, next)
	waitEvent(ctx, t, next.Name(), contract.EventRebootPending, "held (by "+lost.Name()+")")
	waitNode(ctx, t, next.Name(), "reboot once the lost holder's slot expired", rebooted(before))
	lease, err := env.Client.CoordinationV1().Leases(f.ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(lease.Items) != 1 || ptr.Deref(lease.Items[0].Spec.LeaseTransitions, 0) < 1 {
		t.Fatalf("slot leases %v %+v: want one slot that changed hands", err, lease)
	}
}

func TestUptimeGuard(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 4*time.Minute)
	f := newFleet(t, 1, func(r, _, up map[string]any) {
		r["uptimeGuardMinutes"] = 1
		up["autoUpgrade"] = true
	})
	inv := watchInvariant(t, f)
	node := f.nodes[0]
	name := node.Name()
	boot := hostState(t, node).BootTime
	before := bootID(t, name)
	requestReboot(t, name, contract.ReasonUpgrade)
	waitEvent(ctx, t, name, contract.EventRebootPending, "uptime guard")
	waitNode(ctx, t, name, "reboot after the uptime guard", rebooted(before))
	started, err := time.Parse(time.RFC3339, inv.annotation(name, keys.RebootStartedAt()))
	if err != nil {
		t.Fatalf("RebootStartedAt: %v", err)
	}
	// RFC 3339 has second resolution.
	if started.Before(boot.Add(time.Minute).Truncate(time.Second)) {
		t.Fatalf("rebooted at %s, within a minute of boot at %s", started, boot)
	}
}

func TestFailedRebootCommandBacksOff(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 4*time.Minute)
	f := newFleet(t, 1, func(_, _, up map[string]any) { up["autoUpgrade"] = true })
	node := f.nodes[0]
	name := node.Name()
	if err := node.Host().Update(func(st *simhost.State) error { st.RebootFailure = "Failed to talk to init daemon"; return nil }); err != nil {
		t.Fatal(err)
	}
	before := bootID(t, name)
	requestReboot(t, name, contract.ReasonUpgrade)
	failed := waitEvent(ctx, t, name, contract.EventRebootFailed, "Failed to talk to init daemon")
	if failed.Type != corev1.EventTypeWarning || !strings.Contains(failed.Message, "retrying in 30s") {
		t.Fatalf("RebootFailed event %s %q: want a Warning naming the backoff", failed.Type, failed.Message)
	}
	err := testbed.WaitFor(ctx, leasesLW(f.ns), &coordinationv1.Lease{}, func(ls []*coordinationv1.Lease) (bool, error) {
		for _, l := range ls {
			if ptr.Deref(l.Spec.HolderIdentity, "") != "" {
				return false, nil
			}
		}
		return len(ls) > 0, nil
	})
	if err != nil {
		t.Fatalf("slot not released after the failure: %v", err)
	}
	// No tight loop: within the backoff, one failure only.
	quiet, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lw := eventsLW(name, contract.EventRebootFailed)
	_ = testbed.WaitFor(quiet, lw, &corev1.Event{}, func(evs []*corev1.Event) (bool, error) {
		for _, e := range evs {
			if e.Count > 1 || len(evs) > 1 {
				return true, nil
			}
		}
		return false, nil
	})
	if evs := events(t, name, contract.EventRebootFailed); len(evs) != 1 || evs[0].Count > 1 {
		t.Fatalf("reboot retried within its backoff: %d events, first count %d", len(evs), evs[0].Count)
	}
	// The host recovers; the retry after the backoff reboots.
	if err := node.Host().Update(func(st *simhost.State) error { st.RebootFailure = ""; return nil }); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, name, "reboot after the backoff", rebooted(before))
	if st := hostState(t, node); st.Reboots != 1 {
		t.Fatalf("host rebooted %d times", st.Reboots)
	}
}
