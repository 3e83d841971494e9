package rollout

import (
	"testing"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/openfuyao/npu-stack/internal/contract"
)

func nodeAt(name, rv, state string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv, Labels: map[string]string{"s": state}}}
}

func TestOverlayHidesALaggingCache(t *testing.T) {
	c := NewController(Config{})
	c.remember(nodeAt("a", "120", "cordon-required"))
	got, _ := c.overlay([]*corev1.Node{nodeAt("a", "100", "upgrade-required"), nodeAt("b", "90", "")})
	if got[0].Labels["s"] != "cordon-required" || got[1].ResourceVersion != "90" {
		t.Fatalf("a cache older than our write must be overlaid: %v %v", got[0].Labels, got[1].ResourceVersion)
	}
	got, _ = c.overlay([]*corev1.Node{nodeAt("a", "130", "wait-for-jobs-required")})
	if got[0].ResourceVersion != "130" {
		t.Fatal("once the cache caught up it wins")
	}
	if len(c.written) != 0 {
		t.Fatal("a caught-up write is forgotten")
	}
	c.remember(nodeAt("a", "x", "odd"))
	if got, _ := c.overlay([]*corev1.Node{nodeAt("a", "5", "")}); got[0].ResourceVersion != "5" {
		t.Fatal("non-numeric resourceVersions fall back to the cache")
	}
}

// npuNode is a Ready 910B node on driver 1.0 in state st ("" = none).
func npuNode(name string, st contract.UpgradeState, unschedulable bool) *corev1.Node {
	l := map[string]string{contract.LabelChip: "910b", keys.DriverVersion(): "1.0", keys.DriverReady(): "true"}
	if st != "" {
		l[keys.UpgradeState()] = string(st)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "10", Labels: l},
		Spec:   corev1.NodeSpec{Unschedulable: unschedulable},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

// The loop decides again while a decision's writes are on their way. A
// node with a write queued gets no second action, and the budget counts
// it as the write will leave it when that takes budget, as it is when
// that frees budget (the write may still fail). Either way a second node
// must not be admitted past maxParallel = 1.
func TestQueuedWritesHoldTheBudget(t *testing.T) {
	drv := driverDS("drv", "2.0", map[string]string{contract.LabelChip: "910b"})
	p := policy(func(p *Policy) { p.AutoUpgrade = true })
	b := builder{k: keys, now: now}
	for _, tc := range []struct {
		name   string
		nodes  []*corev1.Node
		queued Action // of node a
	}{{
		name:   "admission of a on its way",
		nodes:  []*corev1.Node{npuNode("a", contract.StateUpgradeRequired, false), npuNode("b", contract.StateUpgradeRequired, false)},
		queued: b.transition(nv("a", in(contract.StateUpgradeRequired)), contract.StateCordonRequired, "admitted"),
	}, {
		name:   "completion of a on its way",
		nodes:  []*corev1.Node{npuNode("a", contract.StateUncordonRequired, true), npuNode("b", contract.StateUpgradeRequired, false)},
		queued: uncordoned(b.transition(nv("a", in(contract.StateUncordonRequired), cordoned), contract.StateDone, "done")),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewController(Config{Keys: keys})
			// No writers run: the write stays on its way.
			c.enqueue(workqueue.NewTyped[string](), []Action{tc.queued})
			nodes, busy := c.overlay(tc.nodes)
			if busy["a"] != busyWriting || len(busy) != 1 {
				t.Fatalf("busy = %v, want only a with a write on its way", busy)
			}
			_, d := DecideChained(Inputs{Nodes: nodes, Drivers: []*appsv1.DaemonSet{drv}, Busy: busy}, View{Keys: keys}, p, keys, now)
			if len(d.Actions) != 0 {
				t.Fatalf("actions %q while a's write is on its way (waiting %v)", moves(d), d.Waiting)
			}
			if d.Waiting["a"] != busyWriting {
				t.Fatalf("a waits for %q, want %q", d.Waiting["a"], busyWriting)
			}
		})
	}
	// Once a's write is done, b goes: the test above is not vacuous.
	c := NewController(Config{Keys: keys})
	nodes, busy := c.overlay([]*corev1.Node{npuNode("a", "", false), npuNode("b", contract.StateUpgradeRequired, false)})
	nodes[0].Labels[keys.DriverVersion()] = "2.0"
	_, d := DecideChained(Inputs{Nodes: nodes, Drivers: []*appsv1.DaemonSet{drv}, Busy: busy}, View{Keys: keys}, p, keys, now)
	if len(d.Actions) != 1 || d.Actions[0].Node != "b" || d.Actions[0].From != contract.StateUpgradeRequired {
		t.Fatalf("with a done, b must be admitted: %q", moves(d))
	}
}

func uncordoned(a Action) Action {
	a.Change.Unschedulable = ptrBool(false)
	return a
}

// A node's actions from one decision are queued together; an action for
// a node whose writes are already on their way is dropped (the next
// decision redoes it), never appended behind writes whose release would
// lose it.
func TestEnqueueKeepsOneDecisionPerNode(t *testing.T) {
	b := builder{k: keys, now: now}
	first := b.transition(nv("a", in(contract.StateCordonRequired)), contract.StateWaitForJobsRequired, "cordoned")
	then := b.transition(nv("a", in(contract.StateWaitForJobsRequired)), contract.StatePodDeletionRequired, "no jobs")
	late := b.transition(nv("a", in(contract.StatePodDeletionRequired)), contract.StateDrainRequired, "late")
	c := NewController(Config{Keys: keys, Log: logrus.New()})
	q := workqueue.NewTyped[string]()
	c.enqueue(q, []Action{first, then})
	c.enqueue(q, []Action{late})
	if got := c.queued["a"]; len(got) != 2 || got[0].To != first.To || got[1].To != then.To {
		t.Fatalf("queued for a: %v, want the first decision's two actions in order", got)
	}
	if q.Len() != 1 {
		t.Fatalf("queue holds %d items, want node a once", q.Len())
	}
}
