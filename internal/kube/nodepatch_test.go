package kube

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestApplyToMatchesTheMergePatch(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "1", "b": "2"}}}
	got := NodeChange{
		Labels:        map[string]*string{"a": nil, "c": Set("3")},
		Annotations:   map[string]*string{"x": Set("y"), "gone": nil},
		Unschedulable: ptr(true),
	}.ApplyTo(n)
	if want := map[string]string{"b": "2", "c": "3"}; !reflect.DeepEqual(got.Labels, want) {
		t.Errorf("labels %v, want %v", got.Labels, want)
	}
	if want := map[string]string{"x": "y"}; !reflect.DeepEqual(got.Annotations, want) {
		t.Errorf("annotations %v, want %v", got.Annotations, want)
	}
	if !got.Spec.Unschedulable {
		t.Error("not cordoned")
	}
	if n.Labels["a"] != "1" || n.Spec.Unschedulable {
		t.Error("ApplyTo changed its input")
	}
}

func TestMergeLaterEditsWin(t *testing.T) {
	first := NodeChange{Labels: map[string]*string{"s": Set("a"), "k": Set("1")}, Unschedulable: ptr(true)}
	next := NodeChange{Labels: map[string]*string{"s": nil}, Annotations: map[string]*string{"x": Set("y")}}
	m := first.Merge(next)
	if m.Labels["s"] != nil || *m.Labels["k"] != "1" || *m.Annotations["x"] != "y" || m.Unschedulable == nil || !*m.Unschedulable {
		t.Errorf("merged %+v", m)
	}
	if m2 := m.Merge(NodeChange{Unschedulable: ptr(false)}); *m2.Unschedulable {
		t.Error("a later uncordon lost")
	}
	if *first.Labels["s"] != "a" {
		t.Error("Merge changed its receiver")
	}
}

func ptr(b bool) *bool { return &b }
