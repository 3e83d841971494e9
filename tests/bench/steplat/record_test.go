package steplat

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// stepClock returns at(0), at(10), at(20), ... on successive calls.
func stepClock() func() time.Time {
	n := 0
	return func() time.Time {
		n++
		return at((n - 1) * 10)
	}
}

func testPod(uid, node string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: uid}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
}

func TestPodHandlerKeepsInPlaceRestarts(t *testing.T) {
	r := NewRecorder(contract.Keys{Domain: contract.DefaultDomain}, stepClock())
	h := r.PodHandler()
	up, down := testPod("p", "n", true), testPod("p", "n", false)
	h.OnAdd(up, false)                     // 0: created Ready
	h.OnUpdate(up, up)                     // 10: no change
	h.OnUpdate(up, down)                   // 20: the kubelet restarts it after a reboot
	h.OnUpdate(down, down)                 // 30: still held
	h.OnUpdate(down, up)                   // 40: Ready again, same UID
	h.OnUpdate(up, down)                   // 50
	h.OnUpdate(down, up)                   // 60
	h.OnDelete(up)                         // 70
	h.OnAdd(testPod("q", "", true), false) // not scheduled: ignored
	p := r.Take().Pods["p"]
	if p == nil {
		t.Fatal("pod p not recorded")
	}
	if fmt.Sprint(p.ReadyAt) != fmt.Sprint([]time.Time{at(0), at(40), at(60)}) || fmt.Sprint(p.NotReadyAt) != fmt.Sprint([]time.Time{at(20), at(50)}) ||
		!p.GoneAt.Equal(at(70)) || p.Node != "n" || !p.FirstSeen.Equal(at(0)) {
		t.Fatalf("sample %+v", p)
	}
	for _, tc := range []struct {
		ms, ready int // ready < 0: not Ready at ms
	}{{0, 0}, {15, 0}, {20, -1}, {35, -1}, {40, 40}, {45, 40}, {55, -1}, {65, 60}, {70, -1}, {100, -1}} {
		got, ok := p.ReadyBy(at(tc.ms))
		if ok != (tc.ready >= 0) || (ok && !got.Equal(at(tc.ready))) {
			t.Errorf("ReadyBy(%d) = %v, %v; want Ready since %d", tc.ms, got, ok, tc.ready)
		}
	}
	if len(r.Take().Pods) != 0 {
		t.Error("Take does not start afresh")
	}
}

func TestPodHandlerDeletedFinalStateUnknown(t *testing.T) {
	r := NewRecorder(contract.Keys{Domain: contract.DefaultDomain}, stepClock())
	h := r.PodHandler()
	h.OnAdd(testPod("p", "n", false), false)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: testPod("p", "n", false)})
	if p := r.Take().Pods["p"]; p == nil || len(p.ReadyAt) != 0 || !p.GoneAt.Equal(at(10)) {
		t.Fatalf("sample %+v", p)
	}
}

func TestNodeHandlerKeepsChangesOnly(t *testing.T) {
	keys := contract.Keys{Domain: contract.DefaultDomain}
	r := NewRecorder(keys, stepClock())
	h := r.NodeHandler()
	node := func(state, boot string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{}}}
		if state != "" {
			n.Labels[keys.UpgradeState()] = state
		}
		n.Status.NodeInfo.BootID = boot
		return n
	}
	h.OnAdd(node("", "b1"), false)
	h.OnUpdate(nil, node("", "b1")) // a heartbeat: same facts
	h.OnUpdate(nil, node("reboot-required", "b1"))
	h.OnUpdate(nil, node("reboot-required", "b2"))
	got := r.Take().Nodes["n"]
	want := []NodeSample{{At: at(0), BootID: "b1"}, {At: at(20), State: "reboot-required", BootID: "b1"}, {At: at(30), State: "reboot-required", BootID: "b2"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("samples %v, want %v", got, want)
	}
	// The next timelines start from the node as last seen, so that a
	// first write taking several steps is a transition from it.
	h.OnUpdate(nil, node("", "b2"))
	got = r.Take().Nodes["n"]
	want = []NodeSample{{At: at(30), State: "reboot-required", BootID: "b2"}, {At: at(40), BootID: "b2"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after Take: samples %v, want %v", got, want)
	}
}
