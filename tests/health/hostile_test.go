package health_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

// driverBinding is the ClusterRoleBinding that lets this fleet's driver
// pod (driver entry and health-watch) read and patch its Node.
func (f *fleet) driverBinding(ctx context.Context) *rbacv1.ClusterRoleBinding {
	f.t.Helper()
	list, err := env.Client.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for i, b := range list.Items {
		for _, s := range b.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Namespace == f.ns && strings.HasSuffix(s.Name, "-driver") {
				return &list.Items[i]
			}
		}
	}
	f.t.Fatalf("no ClusterRoleBinding of the driver service account in %s", f.ns)
	return nil
}

// The health-watch loses its API access (the binding of its role gone, as
// for a node cut off from the control plane, every call fails) and the
// chips wedge: the marker must go within the threshold all the same, so
// the device plugin stops advertising; the Node follows once access is
// back.
func TestWedgeRemovesTheMarkerWithoutTheAPIServer(t *testing.T) {
	const interval, threshold = 1, 3
	f := newFleet(t, fleetOptions{nodes: 1, probeInterval: interval, threshold: threshold})
	node := f.nodes[0]
	ctx := ctxTimeout(t, 3*time.Minute)
	waitNode(ctx, t, node.Name(), "driver ready", healthy(desiredVersion))

	b := f.driverBinding(ctx)
	if err := env.Client.RbacV1().ClusterRoleBindings().Delete(ctx, b.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "the watch refused by the API server", func() bool {
		return strings.Contains(f.logs(node, "watch"), "forbidden")
	})
	if err := node.Host().Wedge(1); err != nil {
		t.Fatal(err)
	}
	// Probes run every interval (each up to the 1 s timeout): threshold
	// of them plus slack.
	deadline, cancel := context.WithTimeout(ctx, threshold*(interval+1)*time.Second+5*time.Second)
	defer cancel()
	eventually(deadline, t, "marker removed although every API call fails", func() bool { _, ok, _ := markers(node).Ready(); return !ok })
	n, err := env.Client.CoreV1().Nodes().Get(ctx, node.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !healthy(desiredVersion)(n) {
		t.Fatalf("the Node changed although the watch may not patch it: %v", n.Labels)
	}

	b.ResourceVersion, b.UID = "", ""
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, node.Name(), "wedge reported once the API server answers", wedged)
}

// npu-smi stuck in uninterruptible sleep (it ignores being killed): each
// probe is abandoned at its timeout, the watch goes on and reports the
// wedge after the threshold; freed, the chips are probed again.
func TestStuckNPUSMIIsReportedAsAWedge(t *testing.T) {
	const interval, threshold = 1, 3
	f := newFleet(t, fleetOptions{nodes: 1, probeInterval: interval, threshold: threshold})
	node := f.nodes[0]
	ctx := ctxTimeout(t, 3*time.Minute)
	waitNode(ctx, t, node.Name(), "driver ready", healthy(desiredVersion))

	if err := node.Host().SetSMI(simhost.SMIStuck, "", 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Host().SetSMI(simhost.SMINormal, "", 0) })
	deadline, cancel := context.WithTimeout(ctx, threshold*(interval+1)*time.Second+5*time.Second)
	defer cancel()
	waitNode(deadline, t, node.Name(), "wedge reported while npu-smi is stuck", wedged)
	eventually(deadline, t, "marker removed", func() bool { _, ok, _ := markers(node).Ready(); return !ok })
	if logs := f.logs(node, "watch"); !strings.Contains(logs, "npu-smi info hung: no answer within 1s") || !strings.Contains(logs, "is still hung") {
		t.Fatalf("watch log does not show the hung npu-smi:\n%s", logs)
	}

	// The device comes back: the abandoned npu-smi returns, probes pass.
	if err := node.Host().SetSMI(simhost.SMINormal, "", 0); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, node.Name(), "recovered", func(n *corev1.Node) bool { return healthy(desiredVersion)(n) })
}
