package rollout

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// The caches hold the pods and DaemonSets a node view reads, judged by
// each object alone; ordinary workloads and other DaemonSets stay out.
func TestCacheScopeKeepsWhatAViewReads(t *testing.T) {
	wait, _ := labels.Parse("batch=yes")
	byName, _ := ParseTarget("kube-system/dra-plugin")
	bySel, _ := ParseTarget("monitoring/selector:app=probe")
	s := newCacheScope(Config{Namespace: "npu", DriverSelector: labels.SelectorFromSet(labels.Set{"app": "npu-driver-daemonset"}),
		Targets: []TargetSpec{byName, bySel}, Policy: Policy{WaitForCompletion: WaitPolicy{Selector: wait}}})
	ds := func(ns, name string, l map[string]string) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l}}
	}
	for _, tc := range []struct {
		ds   *appsv1.DaemonSet
		want bool
	}{
		{ds("npu", "npu-stack-driver-910b", map[string]string{"app": "npu-driver-daemonset"}), true},
		{ds("npu", "npu-stack-rebooter", nil), false},
		{ds("other", "npu-stack-driver-910b", map[string]string{"app": "npu-driver-daemonset"}), false},
		{ds("kube-system", "dra-plugin", nil), true},
		{ds("kube-system", "kube-proxy", nil), false},
		{ds("monitoring", "probe", map[string]string{"app": "probe"}), true},
		{ds("monitoring", "node-exporter", map[string]string{"app": "node-exporter"}), false},
	} {
		if got := s.keepDaemonSet(tc.ds); got != tc.want {
			t.Errorf("DaemonSet %s/%s cached: %v, want %v", tc.ds.Namespace, tc.ds.Name, got, tc.want)
		}
	}
	if got := s.daemonSetNamespace(); got != metav1.NamespaceAll {
		t.Errorf("DaemonSets watched in %q, want all namespaces (targets elsewhere)", got)
	}
	if got := newCacheScope(Config{Namespace: "npu", Targets: []TargetSpec{{Namespace: "npu", Name: "dp"}}}).daemonSetNamespace(); got != "npu" {
		t.Errorf("DaemonSets watched in %q, want npu (every target there)", got)
	}

	npu := corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("1")}
	pod := func(ns, name, node string, owner string, l map[string]string, limits corev1.ResourceList) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: limits}}}}}
		if owner != "" {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: owner, Controller: ptr.To(true)}}
		}
		return p
	}
	done := pod("ml", "done", "n1", "", nil, npu)
	done.Status.Phase = corev1.PodSucceeded
	rs := pod("web", "web-5d4f-x", "n1", "", nil, nil)
	rs.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-5d4f", Controller: ptr.To(true)}}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want bool
	}{
		{pod("npu", "driver-x", "n1", "npu-stack-driver-910b", nil, nil), true},
		{pod("npu", "rebooter-x", "n1", "npu-stack-rebooter", nil, nil), true}, // the chart's namespace: a driver may be any of its DaemonSets
		{pod("kube-system", "dra-plugin-x", "n1", "dra-plugin", nil, nil), true},
		{pod("kube-system", "kube-proxy-x", "n1", "kube-proxy", nil, nil), false},
		{pod("monitoring", "node-exporter-x", "n1", "node-exporter", nil, nil), true}, // a selector target: any DaemonSet there may match
		{pod("ml", "train", "n1", "", nil, npu), true},
		{pod("ml", "train-pending", "", "", nil, npu), false},
		{done, false},
		{pod("ml", "job", "n1", "", map[string]string{"batch": "yes"}, nil), true},
		{pod("ml", "logger", "n1", "logger", map[string]string{"batch": "yes"}, nil), false}, // a DaemonSet pod is never waited for
		{pod("web", "bare", "n1", "", nil, nil), false},
		{rs, false},
	} {
		if got := s.keepPod(tc.pod); got != tc.want {
			t.Errorf("pod %s/%s cached: %v, want %v", tc.pod.Namespace, tc.pod.Name, got, tc.want)
		}
	}
}

// The filtered watch keeps the informer's store to the kept objects: an
// object that stops being kept is deleted from it, one that starts being
// kept is added, and changes of objects never kept reach no one.
func TestFilteredWatchFollowsWhatIsKept(t *testing.T) {
	kept := func(o runtime.Object) bool { return o.(*corev1.Pod).Labels["keep"] == "yes" }
	fake := watch.NewFake()
	lw := newFilteredLW(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.PodList{Items: []corev1.Pod{*labelledPod("a", "yes"), *labelledPod("b", "no")}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fake, nil },
	}, kept)
	list, err := lw.ListWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if items := list.(*corev1.PodList).Items; len(items) != 1 || items[0].Name != "a" {
		t.Fatalf("list passed on %v, want pod a only", items)
	}
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		fake.Modify(labelledPod("b", "no"))  // never kept: dropped
		fake.Modify(labelledPod("a", "no"))  // no longer kept: deleted
		fake.Modify(labelledPod("b", "yes")) // now kept: an update the informer adds
		fake.Delete(labelledPod("a", "no"))  // already gone: dropped
		fake.Add(labelledPod("c", "no"))     // dropped
		fake.Delete(labelledPod("c", "no"))  // dropped
		fake.Action(watch.Bookmark, labelledPod("", ""))
		fake.Delete(labelledPod("b", "yes"))
		fake.Stop()
	}()
	var got []string
	for e := range w.ResultChan() {
		got = append(got, string(e.Type)+" "+e.Object.(*corev1.Pod).Name)
	}
	want := []string{"DELETED a", "MODIFIED b", "BOOKMARK ", "DELETED b"}
	if len(got) != len(want) {
		t.Fatalf("events passed on %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events passed on %q, want %q", got, want)
		}
	}
}

func labelledPod(name, keep string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"keep": keep}}}
}
