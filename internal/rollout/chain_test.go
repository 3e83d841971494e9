package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// chainNode is a Ready NPU node with driver 1.0 loaded and extra labels
// and annotations ("key=value" pairs: labels with a "label:" prefix).
func chainNode(name string, kv ...string) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "7",
			Labels: map[string]string{keys.DriverVersion(): "1.0", keys.DriverReady(): contract.True}, Annotations: map[string]string{}},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-" + name},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	for _, p := range kv {
		k, v, _ := strings.Cut(p, "=")
		if l, ok := strings.CutPrefix(k, "label:"); ok {
			n.Labels[l] = v
		} else {
			n.Annotations[k] = v
		}
	}
	return n
}

func chainPolicy(parallel int, unavailable string) Policy {
	return Policy{AutoUpgrade: true, MaxParallel: parallel, MaxUnavailable: intstr.Parse(unavailable), MaxFailures: 1}
}

func chained(p Policy, in Inputs) Decision {
	if in.Drivers == nil {
		in.Drivers = []*appsv1.DaemonSet{driverDS("drv", "2.0", nil)}
	}
	_, d := DecideChained(in, View{Keys: keys}, p, keys, now)
	return d
}

// path renders a transition as "node: from>via>…>to" ("" = no label).
func path(a Action) string {
	s := []string{string(a.From)}
	for _, v := range a.Via {
		s = append(s, string(v))
	}
	return a.Node + ": " + strings.Join(append(s, string(a.To)), ">")
}

func TestChainedFreshRolloutWritesOncePerNode(t *testing.T) {
	nodes := []*corev1.Node{chainNode("n0"), chainNode("n1"), chainNode("n2"), chainNode("n3")}
	d := chained(chainPolicy(2, "50%"), Inputs{Nodes: nodes})
	var got []string
	for _, a := range d.Actions {
		if a.Kind != ActTransition || a.ResourceVersion != "7" {
			t.Fatalf("%s: kind %s rv %q, want a transition at the cached resourceVersion", a.Node, a.Kind, a.ResourceVersion)
		}
		got = append(got, path(a))
	}
	want := []string{
		"n0: >upgrade-required>cordon-required>wait-for-jobs-required>pod-deletion-required>drain-required>reboot-required",
		"n1: >upgrade-required>cordon-required>wait-for-jobs-required>pod-deletion-required>drain-required>reboot-required",
		"n2: >upgrade-required", "n3: >upgrade-required",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("chains:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	a := d.Actions[0]
	ch := a.Change
	if ch.Unschedulable == nil || !*ch.Unschedulable || *ch.Labels[keys.RebootRequired()] != contract.True ||
		*ch.Annotations[keys.RebootReason()] != "upgrade" || *ch.Annotations[keys.UpgradeBootID()] != "boot-n0" ||
		*ch.Annotations[keys.UpgradeWasCordoned()] != "false" || *ch.Labels[keys.UpgradeState()] != "reboot-required" {
		t.Fatalf("merged change misses a step's edits: %+v", ch)
	}
	if len(a.Events) != 1 || a.Events[0].Reason != contract.EventRebootRequired || !strings.Contains(a.Message, "cordoned; no workloads to wait for") {
		t.Fatalf("events %+v message %q", a.Events, a.Message)
	}

	// Where the chain stopped is where single steps stop too: the nodes
	// wait for the rebooter.
	for i, a := range d.Actions {
		nodes[i] = a.Change.ApplyTo(nodes[i])
	}
	if d := Decide(BuildSnapshot(Inputs{Nodes: nodes, Drivers: []*appsv1.DaemonSet{driverDS("drv", "2.0", nil)}}, View{Keys: keys}),
		chainPolicy(2, "50%"), keys, now); len(d.Actions) != 0 {
		t.Fatalf("a single step after the chains still moves: %v", moves(d))
	}
}

func TestChainStopsAtEvictions(t *testing.T) {
	train := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml"}, Spec: corev1.PodSpec{NodeName: "n0",
		Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("1")}}}}}}
	d := chained(chainPolicy(0, "100%"), Inputs{Nodes: []*corev1.Node{chainNode("n0", "label:"+keys.UpgradeState()+"=upgrade-required")}, Pods: cached(train)})
	if len(d.Actions) != 1 || path(d.Actions[0]) != "n0: upgrade-required>cordon-required>wait-for-jobs-required>pod-deletion-required" {
		t.Fatalf("actions %v; want one chain ending where the NPU pods must be evicted", moves(d))
	}
	p := chainPolicy(0, "100%")
	p.Drain.Enable = true
	d = chained(p, Inputs{Nodes: []*corev1.Node{chainNode("n0", "label:"+keys.UpgradeState()+"=pod-deletion-required")}})
	if len(d.Actions) != 1 || path(d.Actions[0]) != "n0: pod-deletion-required>drain-required" {
		t.Fatalf("actions %v; want the chain to stop before the drain", moves(d))
	}
}

// Patches run in parallel, each conditional on its own node: budget freed
// by one node's write must not admit another node in the same decision.
func TestChainNeverSpendsBudgetFreedInTheSameDecision(t *testing.T) {
	done := chainNode("n0", "label:"+keys.UpgradeState()+"=validation-required", "label:"+keys.DriverVersion()+"=2.0",
		keys.UpgradeWasCordoned()+"=false", keys.UpgradeBootID()+"=old")
	done.Spec.Unschedulable = true
	drv := driverDS("drv", "2.0", nil)
	dpod := ownedPod("drv-n0", "n0", drv, now)
	dpod.Annotations = map[string]string{keys.DriverSpecVersion(): "2.0"}
	dpod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)}}
	last := done.DeepCopy()
	last.Labels[keys.UpgradeState()] = string(contract.StateUncordonRequired)
	for _, tc := range []struct {
		finishing, queued *corev1.Node
		want              string
	}{
		{done, chainNode("n1", "label:"+keys.UpgradeState()+"=upgrade-required"), "n0: validation-required>uncordon-required>"},
		// n1 not even marked yet: its own chain starts this decision.
		{done, chainNode("n1"), "n0: validation-required>uncordon-required>"},
		// n0 frees its budget in the first round already.
		{last, chainNode("n1"), "n0: uncordon-required>"},
	} {
		t.Run(fmt.Sprintf("%s then %q", tc.want, tc.queued.Labels[keys.UpgradeState()]), func(t *testing.T) {
			d := chained(chainPolicy(1, "1"), Inputs{Nodes: []*corev1.Node{tc.finishing, tc.queued}, Pods: cached(dpod), Drivers: []*appsv1.DaemonSet{drv}})
			got := map[string]string{}
			for _, a := range d.Actions {
				got[a.Node] = path(a)
			}
			if got["n0"] != tc.want {
				t.Errorf("n0: %q, want %q in one write", got["n0"], tc.want)
			}
			if c := d.Actions[0].Change.Unschedulable; c == nil || *c {
				t.Error("n0 not uncordoned")
			}
			if p := got["n1"]; strings.Contains(p, "cordon-required") {
				t.Errorf("n1: %q admitted on budget n0's unapplied write frees", p)
			}
		})
	}
}

func TestChainLeavesSingleStepsAlone(t *testing.T) {
	// Failing and waiting nodes: the chained decision is the plain one.
	nodes := []*corev1.Node{
		chainNode("n0", "label:"+keys.UpgradeState()+"=bogus"),
		chainNode("n1", "label:"+keys.UpgradeState()+"=reboot-required", "label:"+keys.RebootRequired()+"=true", keys.UpgradeBootID()+"=boot-n1"),
	}
	in := Inputs{Nodes: nodes, Drivers: []*appsv1.DaemonSet{driverDS("drv", "2.0", nil)}}
	plain := Decide(BuildSnapshot(in, View{Keys: keys}), chainPolicy(1, "1"), keys, now)
	d := chained(chainPolicy(1, "1"), in)
	if fmt.Sprint(moves(d)) != fmt.Sprint(moves(plain)) || d.Outcome != plain.Outcome || fmt.Sprint(d.Waiting) != fmt.Sprint(plain.Waiting) {
		t.Fatalf("chained %v %s %v, plain %v %s %v", moves(d), d.Outcome, d.Waiting, moves(plain), plain.Outcome, plain.Waiting)
	}
}

// BenchmarkDecideChained is one decision of a fresh rollout of 5,000 nodes
// with three DaemonSet pods each (driver, device plugin, exporter): every
// node changes, the worst case for the chained rounds.
func BenchmarkDecideChained(b *testing.B) {
	drv := driverDS("drv", "2.0", nil)
	dp := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "dp", Namespace: "ns", UID: "uid-dp"}}
	ex := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "ex", Namespace: "ns", UID: "uid-ex"}}
	in := Inputs{Drivers: []*appsv1.DaemonSet{drv}, Targets: []ResolvedTarget{{Name: "ns/dp", DaemonSets: []*appsv1.DaemonSet{dp}}, {Name: "ns/ex", DaemonSets: []*appsv1.DaemonSet{ex}}}}
	for i := range 5000 {
		name := fmt.Sprintf("n%04d", i)
		in.Nodes = append(in.Nodes, chainNode(name))
		in.Pods = append(in.Pods, cached(ownedPod("drv-"+name, name, drv, now), ownedPod("dp-"+name, name, dp, now), ownedPod("ex-"+name, name, ex, now))...)
	}
	p := chainPolicy(0, "10%")
	b.ResetTimer()
	for b.Loop() {
		if _, d := DecideChained(in, View{Keys: keys}, p, keys, now); len(d.Actions) != 5000 {
			b.Fatalf("%d actions", len(d.Actions))
		}
	}
}

// BenchmarkDecideSteady is one decision in the middle of a 10% rollout of
// 5,000 nodes: 500 nodes wait for their reboot, the rest are up to date,
// nothing moves. Its cost is what every change in the cluster costs.
func BenchmarkDecideSteady(b *testing.B) { benchmarkMidRollout(b, 0) }

// BenchmarkDecideAdmitting is the same decision with 10 slots just freed
// and 10 nodes still on the old driver: they chain from no state to
// reboot-required in seven rounds, the rest of the fleet standing still.
func BenchmarkDecideAdmitting(b *testing.B) { benchmarkMidRollout(b, 10) }

func benchmarkMidRollout(b *testing.B, admitting int) {
	drv := driverDS("drv", "2.0", nil)
	dp := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "dp", Namespace: "ns", UID: "uid-dp"}}
	ex := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "ex", Namespace: "ns", UID: "uid-ex"}}
	in := Inputs{Drivers: []*appsv1.DaemonSet{drv}, Targets: []ResolvedTarget{{Name: "ns/dp", DaemonSets: []*appsv1.DaemonSet{dp}}, {Name: "ns/ex", DaemonSets: []*appsv1.DaemonSet{ex}}}}
	since := keys.UpgradeSince() + "=" + now.Add(-time.Minute).Format(time.RFC3339)
	for i := range 5000 {
		name := fmt.Sprintf("n%04d", i)
		switch {
		case i < admitting:
			in.Nodes = append(in.Nodes, chainNode(name))
		case i%10 == 0 && i >= 10*admitting:
			in.Nodes = append(in.Nodes, chainNode(name, "label:"+keys.UpgradeState()+"="+string(contract.StateRebootRequired),
				"label:"+keys.RebootRequired()+"=true", keys.UpgradeBootID()+"=boot-"+name, since, keys.UpgradeWasCordoned()+"=false"))
		default:
			in.Nodes = append(in.Nodes, chainNode(name, "label:"+keys.DriverVersion()+"=2.0"))
		}
		in.Pods = append(in.Pods, cached(ownedPod("drv-"+name, name, drv, now), ownedPod("dp-"+name, name, dp, now), ownedPod("ex-"+name, name, ex, now))...)
	}
	p := chainPolicy(0, "10%")
	b.ResetTimer()
	for b.Loop() {
		_, d := DecideChained(in, View{Keys: keys}, p, keys, now)
		if len(d.Actions) != admitting {
			b.Fatalf("%d actions, want %d: %v", len(d.Actions), admitting, moves(d))
		}
		for _, a := range d.Actions {
			if a.To != contract.StateRebootRequired {
				b.Fatalf("%s chained to %s, want %s", a.Node, a.To, contract.StateRebootRequired)
			}
		}
	}
}
