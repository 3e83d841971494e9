package uninstall

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Run itself (its writes in order, dry run, second run, the pods it waits
// for) is tested on the real control plane in tests/uninstall.

func TestDaemonSetPod(t *testing.T) {
	owned := func(kind string, controller bool) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: kind, Name: "x", Controller: ptr.To(controller)}}}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"a DaemonSet's", owned("DaemonSet", true), true},
		{"a ReplicaSet's (the fleet exporter)", owned("ReplicaSet", true), false},
		{"a Job's", owned("Job", true), false},
		{"a DaemonSet's reference that is no controller", owned("DaemonSet", false), false},
		{"no owner", &corev1.Pod{}, false},
	} {
		if got := daemonSetPod(tc.pod); got != tc.want {
			t.Errorf("%s: daemonSetPod = %v, want %v", tc.name, got, tc.want)
		}
	}
}
