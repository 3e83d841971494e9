package reboot

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func testPod(name string, npu bool, mutate ...func(*corev1.Pod)) *corev1.Pod {
	c := corev1.Container{Name: "c"}
	if npu {
		c.Resources.Limits = corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("1")}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "work", UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: "npu-0", Containers: []corev1.Container{c}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func ownedByDaemonSet(ds string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds, Controller: ptrTo(true)}}
	}
}

// evictionRecorder makes the fake API server delete a pod on its eviction,
// refusing (429, as a PodDisruptionBudget does) the first refusals[name]
// times.
type evictionRecorder struct {
	mu       sync.Mutex
	refusals map[string]int
	evicted  []string
}

func (r *evictionRecorder) install(c *fake.Clientset) {
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.refusals[name] != 0 {
			r.refusals[name]--
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		r.evicted = append(r.evicted, name)
		gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
		if err := c.Tracker().Delete(gvr, a.GetNamespace(), name); err != nil {
			return true, nil, err
		}
		return true, nil, nil
	})
}

func TestEvictNPUPodsLikeKubectlDrain(t *testing.T) {
	pods := []runtime.Object{
		testPod("npu-job", true),
		testPod("cpu-job", false),
		testPod("npu-scratch", true, func(p *corev1.Pod) { // emptyDir, no controller: --force --delete-emptydir-data
			p.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}),
		testPod("npu-ds", true, ownedByDaemonSet("live")),
		testPod("npu-orphan", true, ownedByDaemonSet("gone")),
		testPod("npu-ds-done", true, ownedByDaemonSet("live"), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		testPod("npu-mirror", true, func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
		}),
		testPod("npu-guarded", true),
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "live", Namespace: "work"}},
	}
	c := fake.NewClientset(pods...)
	rec := &evictionRecorder{refusals: map[string]int{"npu-guarded": 1}}
	rec.install(c)
	var out strings.Builder
	if err := EvictNPUPods(context.Background(), c, "npu-0", time.Minute, &out); err != nil {
		t.Fatal(err)
	}
	slices.Sort(rec.evicted)
	want := []string{"npu-ds-done", "npu-guarded", "npu-job", "npu-orphan", "npu-scratch"}
	if !slices.Equal(rec.evicted, want) {
		t.Fatalf("evicted %v, want %v\n%s", rec.evicted, want, out.String())
	}
	for _, kept := range []string{"cpu-job", "npu-ds", "npu-mirror"} {
		if _, err := c.CoreV1().Pods("work").Get(context.Background(), kept, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v", kept, err)
		}
	}
	if !strings.Contains(out.String(), "npu-guarded refused (will retry") {
		t.Errorf("the PodDisruptionBudget refusal was not reported:\n%s", out.String())
	}
}

func TestEvictNPUPodsGivesUpAtTheTimeout(t *testing.T) {
	c := fake.NewClientset(testPod("npu-guarded", true))
	rec := &evictionRecorder{refusals: map[string]int{"npu-guarded": 1 << 30}}
	rec.install(c)
	start := time.Now()
	err := EvictNPUPods(context.Background(), c, "npu-0", 1500*time.Millisecond, io.Discard)
	if err == nil || !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "PodDisruptionBudget") {
		t.Fatalf("err = %v, want the refusal, wrapped", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("gave up after %s", took)
	}
}

func TestEvictNPUPodsWaitsUntilTheEvictedPodIsGone(t *testing.T) {
	c := fake.NewClientset(testPod("npu-job", true))
	// The eviction is accepted but the pod terminates later (its grace
	// period): only then is the eviction done.
	gone := make(chan struct{})
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		go func() {
			time.Sleep(1500 * time.Millisecond)
			_ = c.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "work", "npu-job")
			close(gone)
		}()
		return true, nil, nil
	})
	if err := EvictNPUPods(context.Background(), c, "npu-0", time.Minute, io.Discard); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone:
	default:
		t.Fatal("returned before the pod was gone")
	}
}
