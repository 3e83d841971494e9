package rollout

import (
	"context"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// A patch refused because the node changed since the decision must leave
// the next decision the node as it is now, not the informer's older copy:
// deciding on that would send the same refused patch again (a wasted
// write each time) until the watch catches up. On the real API server:
// the conflict is its resourceVersion precondition.
func TestConflictingPatchLeavesTheCurrentNodeForTheNextDecision(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane; make test runs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := testbed.Start(ctx, testbed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	}()
	client, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	stale, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "npu-0",
		Labels: map[string]string{keys.UpgradeState(): string(contract.StateCordonRequired)}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Someone else (the rebooter, a kubelet) writes the node after the
	// rollout's informer saw it.
	cur := stale.DeepCopy()
	cur.Annotations = map[string]string{"example.com/touched": "yes"}
	if cur, err = client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	c := NewController(Config{Client: client, Log: logrus.New(), Keys: keys, NodeSelector: labels.Everything(), DriverSelector: labels.Everything()})
	b := builder{k: keys, now: now}
	a := b.transition(nv("npu-0", in(contract.StateCordonRequired)), contract.StateWaitForJobsRequired, "cordoned")
	if err := c.transition(ctx, a, stale.ResourceVersion); !apierrors.IsConflict(err) {
		t.Fatalf("patch at the stale resourceVersion: %v, want a conflict", err)
	}
	seen, _ := c.overlay([]*corev1.Node{slimNode(stale, keys)})
	// The controller manager may write the node too (a node without a
	// kubelet gets taints): at least the version that refused the patch.
	if got := seen[0].ResourceVersion; got != cur.ResourceVersion && !newerRV(got, cur.ResourceVersion) {
		t.Fatalf("next decision sees resourceVersion %s, want %s or newer (the informer's copy is %s)", got, cur.ResourceVersion, stale.ResourceVersion)
	}
}
