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
)

// The slim cache must not change a single decision input.
func TestSlimObjectsBuildTheSameSnapshot(t *testing.T) {
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
	in := Inputs{Nodes: []*corev1.Node{node}, Pods: pods, Drivers: []*appsv1.DaemonSet{drv},
		Targets: []ResolvedTarget{{Name: "ns/dp", DaemonSets: []*appsv1.DaemonSet{dp}}}}
	v := View{Keys: keys, WaitSelector: sel}
	full := BuildSnapshot(in, v)

	transform := slimTransform(keys)
	slim := in
	slim.Nodes = []*corev1.Node{mustTransform(t, transform, node.DeepCopy()).(*corev1.Node)}
	slim.Pods = nil
	for _, p := range pods {
		once := mustTransform(t, transform, p.DeepCopy())
		if twice := mustTransform(t, transform, once.(*corev1.Pod).DeepCopy()); !reflect.DeepEqual(once, twice) {
			t.Errorf("pod %s: slimming twice differs from once", p.Name)
		}
		slim.Pods = append(slim.Pods, once.(*corev1.Pod))
	}
	if got := BuildSnapshot(slim, v); !reflect.DeepEqual(got, full) {
		t.Fatalf("snapshot from slim objects:\n%+v\nfrom full objects:\n%+v", got.Nodes[0], full.Nodes[0])
	}
	if n := full.Nodes[0]; n.NPUPods != 1 || n.WaitPods != 2 || len(n.TargetPods["ns/dp"]) != 2 || n.Driver == nil || !n.Driver.Ready {
		t.Fatalf("the comparison covers too little: %+v", n)
	}
	s := slim.Pods[1]
	if len(s.Spec.Containers) != 0 || s.ManagedFields != nil || len(s.Status.ContainerStatuses) != 1 || s.Labels != nil {
		t.Errorf("slim pod keeps what no decision reads: %+v", s)
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
}

func mustTransform(t *testing.T, f func(any) (any, error), obj any) any {
	t.Helper()
	out, err := f(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
