package rollout

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/contract"
)

func driverDS(name, version string, sel map[string]string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "npu-operator", UID: types.UID("uid-" + name)},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{keys.DriverSpecVersion(): version}},
			Spec:       corev1.PodSpec{NodeSelector: sel},
		}},
	}
}

func ownedPod(name, node string, ds *appsv1.DaemonSet, created time.Time) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: ds.Namespace, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(created),
		OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}},
	}, Spec: corev1.PodSpec{NodeName: node}}
}

// cached is what the rollout's pod cache holds of pods.
func cached(pods ...*corev1.Pod) []*CachedPod {
	out := make([]*CachedPod, len(pods))
	for i, p := range pods {
		out[i] = cachePod(p, keys)
	}
	return out
}

func TestBuildSnapshot(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "9",
			Labels: map[string]string{contract.LabelChip: "910b", keys.DriverVersion(): "1.0", keys.UpgradeState(): "drain-required", keys.DriverReady(): "true"},
			Annotations: map[string]string{keys.UpgradeWasCordoned(): "true", keys.UpgradeSince(): now.Format(time.RFC3339),
				keys.UpgradeRerolled(): "u1=ns/dp,garbage"}},
		Spec:   corev1.NodeSpec{Unschedulable: true},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "b1"}, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	drv := driverDS("drv-910b", "2.0", map[string]string{contract.LabelChip: "910b"})
	other := driverDS("drv-310p", "2.0", map[string]string{contract.LabelChip: "310p"})
	dp := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "dp", Namespace: "ns", UID: "uid-dp"}}
	dpod := ownedPod("drv-pod", "n1", drv, now)
	dpod.Annotations = map[string]string{keys.DriverSpecVersion(): "2.0"}
	dpod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)}}
	npu := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml"}, Spec: corev1.PodSpec{NodeName: "n1",
		Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("8")}}}}}}
	done := npu.DeepCopy()
	done.Name, done.Status.Phase = "finished", corev1.PodSucceeded
	cpu := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ml"}, Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{}}}}
	s := BuildSnapshot(Inputs{
		Nodes:   []*corev1.Node{node},
		Pods:    cached(dpod, ownedPod("dp-1", "n1", dp, now.Add(-time.Hour)), ownedPod("dp-2", "n2", dp, now), npu, done, cpu),
		Drivers: []*appsv1.DaemonSet{drv, other},
		Targets: []ResolvedTarget{{Name: "ns/dp", DaemonSets: []*appsv1.DaemonSet{dp}}},
	}, View{Keys: keys})
	n := s.Nodes[0]
	if n.State != contract.StateDrainRequired || !n.StateKnown || !n.Unschedulable || !n.Ready || n.BootID != "b1" {
		t.Fatalf("node facts wrong: %+v", n)
	}
	if n.Desired != "2.0" || n.Loaded != "1.0" || n.Profile != "npu-operator/drv-910b" || !n.DriverReady {
		t.Fatalf("versions wrong: %+v", n)
	}
	if n.WasCordoned == nil || !*n.WasCordoned || !n.Since.Equal(now) || len(n.Rerolled) != 1 {
		t.Fatalf("bookkeeping wrong: %+v", n)
	}
	if n.NPUPods != 1 {
		t.Fatalf("NPU pods = %d, want 1 (finished and CPU pods do not count)", n.NPUPods)
	}
	if n.Driver == nil || !n.Driver.Ready || n.Driver.Version != "2.0" || !n.Driver.ReadyAt.Equal(now) {
		t.Fatalf("driver pod wrong: %+v", n.Driver)
	}
	if got := n.TargetPods["ns/dp"]; len(got) != 1 || got[0].Name != "dp-1" {
		t.Fatalf("target pods on n1 = %+v", got)
	}

	node.Labels[contract.LabelChip] = "tpu"
	s = BuildSnapshot(Inputs{Nodes: []*corev1.Node{node}, Drivers: []*appsv1.DaemonSet{drv}}, View{Keys: keys})
	if e := s.Nodes[0].ProfileError; !strings.Contains(e, "no driver profile covers node n1") || !strings.Contains(e, "driver.profiles") {
		t.Fatalf("uncovered node error = %q", e)
	}
	both := driverDS("drv-all", "2.0", nil)
	s = BuildSnapshot(Inputs{Nodes: []*corev1.Node{node}, Drivers: []*appsv1.DaemonSet{both, driverDS("drv-all2", "2.0", nil)}}, View{Keys: keys})
	if e := s.Nodes[0].ProfileError; !strings.Contains(e, "several driver profiles") {
		t.Fatalf("ambiguous node error = %q", e)
	}
	node.Labels[keys.UpgradeState()] = "bogus"
	s = BuildSnapshot(Inputs{Nodes: []*corev1.Node{node}, Drivers: []*appsv1.DaemonSet{both}}, View{Keys: keys})
	if s.Nodes[0].StateKnown || s.Nodes[0].RawState != "bogus" {
		t.Fatalf("unknown state must be kept raw: %+v", s.Nodes[0])
	}
}

func TestParseTarget(t *testing.T) {
	for _, ok := range []string{"kube-system/dra-plugin", "ns/selector:app=x,tier in (a,b)"} {
		if _, err := ParseTarget(ok); err != nil {
			t.Errorf("ParseTarget(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "noslash", "/name", "ns/", "Bad_NS/x", "ns/selector:", "ns/selector:a=(", "ns/UPPER"} {
		if _, err := ParseTarget(bad); err == nil {
			t.Errorf("ParseTarget(%q) accepted", bad)
		}
	}
	a := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Labels: map[string]string{"app": "x"}}}
	b := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "other", Labels: map[string]string{"app": "x"}}}
	byName, _ := ParseTarget("ns/a")
	bySel, _ := ParseTarget("ns/selector:app=x")
	gone, _ := ParseTarget("ns/missing")
	found, missing := ResolveTargets([]TargetSpec{byName, bySel, gone}, []*appsv1.DaemonSet{a, b})
	if len(found) != 2 || len(found[1].DaemonSets) != 1 || len(missing) != 1 || missing[0] != "ns/missing" {
		t.Fatalf("found %+v missing %v", found, missing)
	}
}

func TestRerolledRoundTrip(t *testing.T) {
	m := map[string]string{"u2": "ns/b", "u1": "ns/a"}
	if s := FormatRerolled(m); s != "u1=ns/a,u2=ns/b" {
		t.Fatalf("format = %q", s)
	}
	if got := ParseRerolled(" u1=ns/a, =x, bad ,u2=ns/b"); len(got) != 2 || got["u2"] != "ns/b" {
		t.Fatalf("parse = %v", got)
	}
}
