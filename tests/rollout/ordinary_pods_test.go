package rollout_test

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestOrdinaryPodsDoNotBlockTheUpgrade (issue 19): with the default
// npuPodDeletion (no force, no deleteEmptyDir) a bare pod and a
// ReplicaSet pod with an emptyDir, neither using an NPU, sit on an NPU
// node next to an NPU workload. Preflight passes, the upgrade completes,
// the NPU pod is evicted and the ordinary pods are left as they were;
// drain, when enabled, still applies its own settings to them.
func TestOrdinaryPodsDoNotBlockTheUpgrade(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	ctx := ctxTimeout(t, 6*time.Minute)
	node := f.nodes[0].Name()

	npu := corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("1")}
	train := ordinaryReplicaSet(f.ns, "train", node, npu, nil)
	cache := ordinaryReplicaSet(f.ns, "cache", node, nil, []corev1.Volume{{Name: "scratch",
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}})
	for _, rs := range []*appsv1.ReplicaSet{train, cache} {
		if _, err := env.Client.AppsV1().ReplicaSets(f.ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	web := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns, Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "web", Image: env.Product.PauseImage}}},
	}
	if _, err := env.Client.CoreV1().Pods(f.ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := map[string]types.UID{} // app → its pod's UID
	err := testbed.WaitFor(ctx, testbed.PodsLW(env.Client, f.ns, "app in (train,cache,web)"), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			before[p.Labels["app"]+"/"+p.Name] = p.UID
		}
		return len(pods) == 3, nil
	})
	if err != nil {
		t.Fatalf("the workloads' pods: %v (have %v)", err, before)
	}

	sel := contract.LabelNPUPresent + "=true," + f.selector()
	pf := preflightArgs(sel, profileArg(t, "910b", "910b", "unused"), "--skip-image-check", "--max-unavailable=100%")
	// Errorf, not Fatalf: the rollout below must show the same on its own.
	if r := hooks(ctx, t, pf...); r.code != 0 {
		t.Errorf("preflight must not refuse because of pods that use no NPU: %s", r)
	}
	// drain, when enabled, covers every pod with its own settings.
	wantRefusal(t, hooks(ctx, t, append(pf, "--drain")...), "node/"+node, f.ns+"/web", "drain step", "driver.upgradePolicy.drain.force")

	args := f.upgrade(ctx, newVersion)
	r := f.startRollout(args)
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d:\n%s", code, tail(r.output(), 20))
	}
	f.checkDone(ctx)
	for key, uid := range before {
		app, name, _ := strings.Cut(key, "/")
		p, err := env.Client.CoreV1().Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case app == "train":
			if err == nil && p.UID == uid && p.DeletionTimestamp == nil {
				t.Errorf("NPU pod %s was not removed by the pod-deletion step", name)
			} else if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		case err != nil:
			t.Errorf("pod %s (%s, no NPU) was removed: %v", name, app, err)
		case p.UID != uid || p.DeletionTimestamp != nil:
			t.Errorf("pod %s (%s, no NPU) was replaced or is being deleted", name, app)
		}
	}
}

// ordinaryReplicaSet runs one pod of the stand-in workload pinned to node.
func ordinaryReplicaSet(ns, name, node string, limits corev1.ResourceList, vols []corev1.Volume) *appsv1.ReplicaSet {
	labels := map[string]string{"app": name}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{NodeName: node, Volumes: vols, Containers: []corev1.Container{{Name: name, Image: env.Product.PauseImage,
					Resources: corev1.ResourceRequirements{Limits: limits}}}},
			},
		},
	}
}
