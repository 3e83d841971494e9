package rollout

import (
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// The caches keep every input of a decision, and little else.
func TestCacheKeepsEveryDecisionInput(t *testing.T) {
	drv := driverDS("drv", "2.0", nil)
	dp := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "dp", Namespace: "ns", UID: "uid-dp"}}
	node := chainNode("n1", "label:"+keys.UpgradeState()+"=validation-required", keys.UpgradeRerolled()+"=u0=ns/dp")
	node.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	node.Status.Images = []corev1.ContainerImage{{Names: []string{"registry/huge:1"}, SizeBytes: 1 << 30}}
	node.Annotations["csi.volume.kubernetes.io/nodeid"] = `{"csi.example.com":"n1"}`
	node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse})
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}

	dpod := ownedPod("drv-n1", "n1", drv, now)
	dpod.Annotations = map[string]string{keys.DriverSpecVersion(): "2.0", "kubectl.kubernetes.io/restartedAt": "x"}
	dpod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)}}
	plugin := ownedPod("dp-n1", "n1", dp, now.Add(-time.Hour))
	plugin.Labels = map[string]string{"batch": "yes", "controller-revision-hash": "5d4f"} // a DaemonSet pod is never waited for
	plugin.Spec.Containers = []corev1.Container{{Name: "plugin", Env: []corev1.EnvVar{{Name: "BIG", Value: "x"}}}}
	plugin.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "plugin", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now.Add(-time.Minute))}}},
		{Name: "sidecar", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
	}
	plugin.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	gone := plugin.DeepCopy()
	gone.Name, gone.UID, gone.DeletionTimestamp = "dp-old", "u0", &metav1.Time{Time: now}
	npu := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml", Labels: map[string]string{"batch": "yes"}}, Spec: corev1.PodSpec{NodeName: "n1",
		InitContainers: []corev1.Container{{Name: "warm", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("1")}}}},
		Containers:     []corev1.Container{{Name: "cpu", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}}}}}
	finished := npu.DeepCopy()
	finished.Name, finished.Status.Phase = "done", corev1.PodSucceeded
	waiting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "ml", Labels: map[string]string{"batch": "yes"}}, Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c"}}}}

	pods := []*corev1.Pod{dpod, plugin, gone, npu, finished, waiting}
	sel, _ := labels.Parse("batch=yes")
	transform := slimTransform(keys)
	in := Inputs{Nodes: []*corev1.Node{node}, Drivers: []*appsv1.DaemonSet{drv},
		Targets: []ResolvedTarget{{Name: "ns/dp", DaemonSets: []*appsv1.DaemonSet{dp}}}}
	for _, p := range pods {
		once := mustTransform(t, transform, p.DeepCopy())
		if twice := mustTransform(t, transform, once.(runtime.Object).DeepCopyObject()); !reflect.DeepEqual(once, twice) {
			t.Errorf("pod %s: slimming twice differs from once", p.Name)
		}
		in.Pods = append(in.Pods, once.(*CachedPod))
	}
	v := View{Keys: keys, WaitSelector: sel}
	full := BuildSnapshot(in, v)

	// Every input a view reads survives the cache.
	n := full.Nodes[0]
	if n.NPUPods != 1 || n.WaitPods != 2 || n.Driver == nil || !n.Driver.Ready || !n.Driver.ReadyAt.Equal(now) || n.Driver.Version != "2.0" {
		t.Fatalf("node view from cached pods: %+v", n)
	}
	tp := n.TargetPods["ns/dp"]
	if len(tp) != 2 || !tp[0].Started.Equal(now.Add(-time.Minute)) || !tp[0].Ready || tp[0].Terminating || !tp[1].Terminating {
		t.Fatalf("target pods from cached pods: %+v", tp)
	}
	// And nothing else: a pod of a DaemonSet keeps no labels, no pod keeps
	// its spec, other annotations or managed fields.
	c := in.Pods[1]
	if c.Labels != nil || c.Annotations != nil || c.ManagedFields != nil || c.OwnerReferences != nil {
		t.Errorf("cached DaemonSet pod keeps what no decision reads: %+v", c)
	}
	if d := in.Pods[0]; len(d.Annotations) != 1 {
		t.Errorf("cached driver pod annotations %v: want the driver version only", d.Annotations)
	}
	if w := in.Pods[5]; w.Labels["batch"] != "yes" {
		t.Errorf("cached pod without a DaemonSet lost the labels the wait selector reads: %v", w.Labels)
	}

	slim := in
	slim.Nodes = []*corev1.Node{mustTransform(t, transform, node.DeepCopy()).(*corev1.Node)}
	if got := BuildSnapshot(slim, v); !reflect.DeepEqual(got, full) {
		t.Fatalf("snapshot from a slim node:\n%+v\nfrom the full node:\n%+v", got.Nodes[0], full.Nodes[0])
	}
	sn := slim.Nodes[0]
	if sn.Status.Images != nil || sn.ManagedFields != nil || sn.Status.Addresses != nil || len(sn.Status.Conditions) != 1 {
		t.Errorf("slim node keeps what no decision reads: %+v", sn)
	}
	if _, ok := sn.Annotations["csi.volume.kubernetes.io/nodeid"]; ok || sn.Annotations[keys.UpgradeRerolled()] == "" {
		t.Errorf("slim node annotations %v: want the contract's only", sn.Annotations)
	}
	if twice := mustTransform(t, transform, sn.DeepCopy()); !reflect.DeepEqual(twice, sn) {
		t.Error("slimming a node twice differs from once")
	}

	// DaemonSets keep what profiles and targets read, not their pod spec.
	drv.Spec.Template.Spec.Containers = []corev1.Container{{Name: "driver", Image: "registry/driver:2.0"}}
	slim.Drivers = []*appsv1.DaemonSet{mustTransform(t, transform, drv.DeepCopy()).(*appsv1.DaemonSet)}
	slim.Targets = []ResolvedTarget{{Name: "ns/dp", DaemonSets: []*appsv1.DaemonSet{mustTransform(t, transform, dp.DeepCopy()).(*appsv1.DaemonSet)}}}
	if got := BuildSnapshot(slim, v); !reflect.DeepEqual(got, full) {
		t.Fatalf("snapshot from slim DaemonSets:\n%+v\nfrom the full ones:\n%+v", got.Nodes[0], full.Nodes[0])
	}
	if sd := slim.Drivers[0]; sd.Spec.Template.Spec.Containers != nil {
		t.Errorf("slim DaemonSet keeps its containers: %+v", sd.Spec.Template.Spec)
	}
}

func mustTransform(t *testing.T, f func(any) (any, error), obj any) any {
	t.Helper()
	out, err := f(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
