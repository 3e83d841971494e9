package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/tests/bench/memhost"
)

const ns = "stack"

func stackPod(name, uid string, driver bool) *corev1.Pod {
	keys := contract.Keys{Domain: contract.DefaultDomain}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid), Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: "n", RestartPolicy: corev1.RestartPolicyAlways,
			InitContainers: []corev1.Container{{Name: "wait-for-driver", Image: "hw"}, {Name: "cdi", Image: "hw"}},
			Containers:     []corev1.Container{{Name: "main", Image: "img"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if driver {
		p.Labels["app"] = "npu-driver-daemonset"
		p.Annotations = map[string]string{keys.DriverSpecVersion(): "2"}
	}
	return p
}

// patchBody is what a status patch of the pod said, decoded.
type patchBody struct {
	Status struct {
		Phase             *corev1.PodPhase         `json:"phase"`
		Message           *string                  `json:"message"`
		PodIP             *string                  `json:"podIP"`
		Conditions        []corev1.PodCondition    `json:"conditions"`
		ContainerStatuses []corev1.ContainerStatus `json:"containerStatuses"`
		InitStatuses      []corev1.ContainerStatus `json:"initContainerStatuses"`
	} `json:"status"`
	raw map[string]map[string]any
}

func TestKubeletRestartsPodsInPlaceAfterReboot(t *testing.T) {
	keys := contract.Keys{Domain: contract.DefaultDomain}
	drv, plugin, exporter := stackPod("driver", "u-drv", true), stackPod("plugin", "u-dp", false), stackPod("exporter", "u-ex", false)
	job := stackPod("job", "u-job", false)
	job.Spec.RestartPolicy = corev1.RestartPolicyNever
	client := fake.NewClientset(drv, plugin, exporter, job)
	writes := map[string][]patchBody{} // pod → status patches, in order
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		if pa.GetSubresource() != "status" || pa.GetPatchType() != types.StrategicMergePatchType {
			t.Errorf("pod %s patched with %s on %q, want a strategic merge patch of status", pa.GetName(), pa.GetPatchType(), pa.GetSubresource())
		}
		var b patchBody
		if err := json.Unmarshal(pa.GetPatch(), &b); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal(pa.GetPatch(), &b.raw)
		writes[pa.GetName()] = append(writes[pa.GetName()], b)
		return false, nil, nil
	})
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	sel, _ := labels.Parse("app=npu-driver-daemonset")
	s := New(Config{Client: client, Keys: keys, NodeSelector: labels.Everything(), Namespace: ns, DriverSelector: sel,
		Machine: simhost.Spec{Chip: "910b", ChipCount: 8}, Clock: clk, Log: logrus.New()})
	// The cache holds the pods at resourceVersion 1; the fake API server
	// answers a patch with "" (a changed pod, as far as the kubelet can
	// tell).
	for _, p := range []*corev1.Pod{drv, plugin, exporter, job} {
		p.ResourceVersion = "1"
		if err := s.pods.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{}}}
	m := &machine{host: memhost.New(simhost.Spec{Chip: "910b", ChipCount: 8}, clk)} // booted, no driver loaded yet
	pass := func(wantWrite bool) time.Duration {
		t.Helper()
		after, wrote, err := s.kubelet(ctx, node, m, clk.Now())
		if err != nil || wrote != wantWrite {
			t.Fatalf("kubelet pass: wrote %v, err %v; want a write: %v", wrote, err, wantWrite)
		}
		return after
	}
	// kwok plays KWOK's pod-ready stage on the cached pod: Ready, the
	// status message kept.
	kwok := func(p *corev1.Pod) {
		t.Helper()
		ready := p.DeepCopy()
		ready.Status.Message = m.restart.mark()
		if err := s.pods.Update(ready); err != nil {
			t.Fatal(err)
		}
	}

	pass(false) // first boot: nothing to restart
	m.restart = s.podsAtBoot("n", "boot-2")
	if len(m.restart.pods) != 3 {
		t.Fatalf("restarting %d pods, want the driver, plugin and exporter (not the job)", len(m.restart.pods))
	}

	pass(true) // hold the plugin and exporter at boot
	for _, name := range []string{"plugin", "exporter"} {
		w := writes[name]
		if len(w) != 1 || *w[0].Status.Phase != corev1.PodRunning || w[0].Status.Message != nil || len(w[0].Status.Conditions) == 0 ||
			w[0].Status.Conditions[0].Status != corev1.ConditionFalse || w[0].Status.ContainerStatuses[0].State.Waiting == nil ||
			w[0].Status.ContainerStatuses[0].State.Running != nil || w[0].Status.InitStatuses[0].State.Running == nil {
			t.Fatalf("%s: %d hold patches, the first %+v", name, len(w), w[0].Status)
		}
	}
	if len(writes["driver"]) != 0 || len(writes["job"]) != 0 {
		t.Fatalf("driver or job written at boot: %d, %d patches", len(writes["driver"]), len(writes["job"]))
	}
	pass(false) // the driver is not loaded yet

	if err := m.host.InstallDriver(ctx, "2", nil); err != nil {
		t.Fatal(err)
	}
	pass(true) // the driver pod restarts once the load completes
	w := writes["driver"]
	if len(w) != 1 || *w[0].Status.Phase != corev1.PodPending || *w[0].Status.Message != m.restart.mark() ||
		w[0].raw["status"]["podIP"] != nil || w[0].raw["status"]["podIPs"] != nil {
		t.Fatalf("driver start patches: %d, the first %+v", len(w), w[0].Status)
	}
	if _, cleared := w[0].raw["status"]["podIPs"]; !cleared {
		t.Fatal("driver start patch keeps the pod IP KWOK assigns again")
	}
	node.Labels[keys.DriverReady()] = contract.True
	// The cache still has the driver pod Ready from before its restart
	// (no mark): wait, and look again when KWOK is late.
	if after := pass(false); after != kwokStartTimeout {
		t.Fatalf("waiting for KWOK, look again after %s, want %s", after, kwokStartTimeout)
	}
	clk.Step(kwokStartTimeout)
	pass(true) // KWOK lost the stamp: the start is written again
	if len(writes["driver"]) != 2 || s.Stats().KWOKRetries != 1 {
		t.Fatalf("driver patches %d, KWOK retries %d; want 2, 1", len(writes["driver"]), s.Stats().KWOKRetries)
	}

	kwok(drv)
	node.Labels[keys.DriverReady()] = contract.False
	pass(false) // driver-ready not reported
	node.Labels[keys.DriverReady()] = contract.True
	pass(true) // now the held pods start
	for _, name := range []string{"plugin", "exporter"} {
		if w := writes[name]; len(w) != 2 || *w[1].Status.Phase != corev1.PodPending || *w[1].Status.Message != m.restart.mark() {
			t.Fatalf("%s: %d patches, the last %+v", name, len(w), w[len(w)-1].Status)
		}
	}
	pass(false)
	if m.restart == nil {
		t.Fatal("done before KWOK started the plugin and exporter")
	}
	kwok(plugin)
	kwok(exporter)
	pass(false)
	if m.restart != nil || s.Stats().PodRestarts != 4 || len(writes["driver"]) != 2 || len(writes["job"]) != 0 {
		t.Fatalf("restart left %+v, %d restarts, %d driver patches, %d job patches", m.restart, s.Stats().PodRestarts, len(writes["driver"]), len(writes["job"]))
	}
}

func TestKubeletNoOpPatchIsNoWrite(t *testing.T) {
	keys := contract.Keys{Domain: contract.DefaultDomain}
	plugin := stackPod("plugin", "u-dp", false)
	plugin.ResourceVersion = "7"
	client := fake.NewClientset()
	// The API server already says what the patch says: it answers with
	// the pod unchanged, and no watch event follows.
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, plugin.DeepCopy(), nil
	})
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	sel, _ := labels.Parse("app=npu-driver-daemonset")
	s := New(Config{Client: client, Keys: keys, NodeSelector: labels.Everything(), Namespace: ns, DriverSelector: sel, Clock: clk, Log: logrus.New()})
	if err := s.pods.Add(plugin); err != nil {
		t.Fatal(err)
	}
	m := &machine{host: memhost.New(simhost.Spec{Chip: "910b", ChipCount: 8}, clk)}
	m.restart = s.podsAtBoot("n", "boot-2")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	if _, wrote, err := s.kubelet(context.Background(), node, m, clk.Now()); err != nil || wrote {
		t.Fatalf("a hold that changed nothing: wrote %v, err %v; want no write (nothing will bring the node back)", wrote, err)
	}
	if !m.restart.pods["u-dp"].held {
		t.Fatal("pod not held")
	}
}

func TestRebooterDoesNotRebootWhenItsBookkeepingConflicts(t *testing.T) {
	keys := contract.Keys{Domain: contract.DefaultDomain}
	client := fake.NewClientset()
	conflict := true
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflict {
			return true, nil, apierrors.NewConflict(corev1.Resource("nodes"), "n", errors.New("the object has been modified"))
		}
		return true, &corev1.Node{}, nil
	})
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	s := New(Config{Client: client, Keys: keys, NodeSelector: labels.Everything(), Namespace: ns, DriverSelector: labels.Everything(), Clock: clk, Log: logrus.New()})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "5",
		Labels:      map[string]string{keys.RebootRequired(): contract.True},
		Annotations: map[string]string{keys.RebootReason(): string(contract.ReasonUpgrade)}}}
	m := &machine{host: memhost.New(simhost.Spec{Chip: "910b", ChipCount: 8, Driver: "1"}, clk)}
	clk.Step(time.Hour) // past any uptime guard
	if _, wrote, err := s.rebooter(context.Background(), node, m, clk.Now()); err != nil || !wrote {
		t.Fatalf("rebooter: wrote %v, err %v", wrote, err)
	}
	if m.host.RebootPending() || s.Stats().Reboots != 0 {
		t.Fatal("rebooted although the reboot bookkeeping was refused (the rollout may have withdrawn the request meanwhile)")
	}
	conflict = false
	if _, _, err := s.rebooter(context.Background(), node, m, clk.Now()); err != nil || !m.host.RebootPending() {
		t.Fatalf("no reboot once the bookkeeping lands: err %v", err)
	}
}
