package reboot_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// An NPU pod that never finishes terminating (a process in uninterruptible
// sleep on the wedged chip; here a finalizer nobody removes) does not hold
// the recovery forever: after --recovery-drain-timeout the rebooter
// reboots anyway and names the pod in a RecoveryDrainTimedOut event.
func TestRecoveryDrainRebootsPastAPodStuckTerminating(t *testing.T) {
	ctx := ctxTimeout(t, 4*time.Minute)
	f := newFleet(t, 1, func(_, rec, _ map[string]any) {
		rec["autoRecover"] = true
		rec["drainTimeoutSeconds"] = 3
	})
	node := f.nodes[0]
	name := node.Name()

	stuck := pod(t, f.ns, "stuck-npu", name, true)
	const finalizer = "npu-stack.test/stuck-in-d-state"
	setFinalizers(t, f.ns, stuck.Name, []string{finalizer})
	t.Cleanup(func() { setFinalizers(t, f.ns, stuck.Name, nil) })

	before := bootID(t, name)
	wedge(t, node)
	waitNode(ctx, t, name, "recovery reboot despite the pod stuck terminating", rebooted(before))
	ev := waitEvent(ctx, t, name, contract.EventRecoveryDrainTimedOut, f.ns+"/"+stuck.Name)
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("RecoveryDrainTimedOut is a %s event, want Warning", ev.Type)
	}
	p, err := env.Client.CoreV1().Pods(f.ns).Get(ctx, stuck.Name, metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("the stuck pod: %v, deletion %v; want it still terminating (the test's finalizer holds it)", err, p.DeletionTimestamp)
	}
	if st := hostState(t, node); st.Reboots != 1 {
		t.Fatalf("host rebooted %d times, want 1", st.Reboots)
	}
}

func setFinalizers(t *testing.T, ns, name string, finalizers []string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": finalizers}})
	if _, err := env.Client.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("set the finalizers of pod %s/%s: %v", ns, name, err)
	}
}
