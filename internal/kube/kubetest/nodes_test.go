package kubetest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/kube"
)

func TestNodesRefuseAStaleResourceVersion(t *testing.T) {
	ctx := context.Background()
	n := NewNodes(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	first, _ := n.Get(ctx, "a")
	if _, err := n.Patch(ctx, "a", kube.NodeChange{Labels: map[string]*string{"x": kube.Set("1")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.PatchIf(ctx, "a", first.ResourceVersion, kube.NodeChange{Labels: map[string]*string{"y": kube.Set("2")}}); !apierrors.IsConflict(err) {
		t.Fatalf("patch at a stale resourceVersion: %v, want a Conflict", err)
	}
	cur, _ := n.Get(ctx, "a")
	got, err := n.PatchIf(ctx, "a", cur.ResourceVersion, kube.NodeChange{Labels: map[string]*string{"x": nil, "y": kube.Set("2")}})
	if err != nil || got.Labels["x"] != "" || got.Labels["y"] != "2" || n.Patches != 2 {
		t.Fatalf("patch at the current resourceVersion: %+v, %v (patches %d)", got.Labels, err, n.Patches)
	}
	if _, err := n.Get(ctx, "b"); !apierrors.IsNotFound(err) {
		t.Fatalf("missing node: %v", err)
	}
}
