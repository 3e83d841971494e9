package rollout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func nodeAt(name, rv, state string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv, Labels: map[string]string{"s": state}}}
}

func TestOverlayWrittenHidesALaggingCache(t *testing.T) {
	c := &Controller{}
	c.remember(nodeAt("a", "120", "cordon-required"))
	got := c.overlayWritten([]*corev1.Node{nodeAt("a", "100", "upgrade-required"), nodeAt("b", "90", "")})
	if got[0].Labels["s"] != "cordon-required" || got[1].ResourceVersion != "90" {
		t.Fatalf("a cache older than our write must be overlaid: %v %v", got[0].Labels, got[1].ResourceVersion)
	}
	got = c.overlayWritten([]*corev1.Node{nodeAt("a", "130", "wait-for-jobs-required")})
	if got[0].ResourceVersion != "130" {
		t.Fatal("once the cache caught up it wins")
	}
	if len(c.written) != 0 {
		t.Fatal("a caught-up write is forgotten")
	}
	c.remember(nodeAt("a", "x", "odd"))
	if got := c.overlayWritten([]*corev1.Node{nodeAt("a", "5", "")}); got[0].ResourceVersion != "5" {
		t.Fatal("non-numeric resourceVersions fall back to the cache")
	}
}
