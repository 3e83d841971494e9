package rollout

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/kubectl/pkg/drain"
	"k8s.io/utils/ptr"
)

// evictPod is a running pod on node n1: npu requests an NPU, owner is
// the kind of its controller ("" = bare), emptyDir gives it one.
func evictPod(name string, npu bool, owner string, emptyDir bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if npu {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("1")}
	}
	if owner != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: owner, Name: name + "-owner", UID: "u-" + "owner", Controller: ptr.To(true)}}
	}
	if emptyDir {
		p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	}
	return p
}

// Only NPU pods are subject to npuPodDeletion: whatever else runs on the
// node is skipped, never refused.
func TestNPUPodFilter(t *testing.T) {
	strict, lax := EvictPolicy{}, EvictPolicy{Force: true, DeleteEmptyDir: true}
	done := evictPod("done", true, "", true)
	done.Status.Phase = corev1.PodSucceeded
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		p    EvictPolicy
		want drain.PodDeleteStatus
	}{
		{"bare non-NPU pod", evictPod("web", false, "", false), strict, drain.MakePodDeleteStatusSkip()},
		{"ReplicaSet non-NPU pod with emptyDir", evictPod("cache", false, "ReplicaSet", true), strict, drain.MakePodDeleteStatusSkip()},
		{"non-NPU pod with force", evictPod("web", false, "", true), lax, drain.MakePodDeleteStatusSkip()},
		{"managed NPU pod", evictPod("train", true, "ReplicaSet", false), strict, drain.MakePodDeleteStatusOkay()},
		{"bare NPU pod", evictPod("train", true, "", false), strict, drain.MakePodDeleteStatusWithError(npuUnmanagedRefusal)},
		{"bare NPU pod with force", evictPod("train", true, "", false), EvictPolicy{Force: true}, drain.MakePodDeleteStatusWithWarning(true, npuUnmanagedWarning)},
		{"orphaned DaemonSet NPU pod", evictPod("train", true, "DaemonSet", false), strict, drain.MakePodDeleteStatusWithError(npuUnmanagedRefusal)},
		{"NPU pod with emptyDir", evictPod("train", true, "Job", true), strict, drain.MakePodDeleteStatusWithError(npuEmptyDirRefusal)},
		{"NPU pod with emptyDir allowed", evictPod("train", true, "Job", true), EvictPolicy{DeleteEmptyDir: true}, drain.MakePodDeleteStatusWithWarning(true, npuEmptyDirWarning)},
		{"bare NPU pod with emptyDir, both allowed", evictPod("train", true, "", true), lax, drain.MakePodDeleteStatusWithWarning(true, npuUnmanagedWarning+"; "+npuEmptyDirWarning)},
		{"finished bare NPU pod with emptyDir", done, strict, drain.MakePodDeleteStatusOkay()},
	} {
		if got := npuPodFilter(*tc.pod, tc.p); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// Through drain.Helper: drain's own filters run before npuPodFilter and
// must not refuse the pods it would skip.
func TestCheckEvictableIgnoresOrdinaryPods(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(evictPod("web", false, "", false), evictPod("cache", false, "ReplicaSet", true),
		evictPod("train", true, "ReplicaSet", false))
	if err := CheckEvictable(ctx, client, "n1", EvictNPUPods, Policy{}); err != nil {
		t.Fatalf("pod-deletion must ignore pods that use no NPU: %v", err)
	}
	// drain, when enabled, covers every pod with its own settings.
	err := CheckEvictable(ctx, client, "n1", EvictDrain, Policy{Drain: DrainPolicy{Enable: true}})
	for _, want := range []string{"ml/web", "ml/cache", "by the drain step", "driver.upgradePolicy.drain.force"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("drain must refuse with its own settings, mentioning %q: %v", want, err)
		}
	}
	if err := CheckEvictable(ctx, client, "n1", EvictDrain, Policy{Drain: DrainPolicy{Enable: true, EvictPolicy: EvictPolicy{Force: true, DeleteEmptyDir: true}}}); err != nil {
		t.Errorf("drain with force and deleteEmptyDir: %v", err)
	}
	// An NPU pod the policy does not allow is still refused, by name, with the fix.
	if _, err := client.CoreV1().Pods("ml").Create(ctx, evictPod("bare-train", true, "", false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = CheckEvictable(ctx, client, "n1", EvictNPUPods, Policy{})
	for _, want := range []string{"ml/bare-train", "npuPodDeletion.force=true", "node n1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a bare NPU pod must be refused, mentioning %q: %v", want, err)
		}
	}
	if err != nil && strings.Contains(err.Error(), "ml/web") {
		t.Errorf("the refusal must not name pods that use no NPU: %v", err)
	}
}
