package fleet

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/tests/bench/memhost"
)

// A node's agents are separate processes that act at once: one pass of
// the simulator plays each of them on the node its predecessor wrote,
// without waiting for the watch echo of every write, and the driver load
// runs from the boot while the others report it.
func TestOnePassPlaysEveryAgentOfTheBoot(t *testing.T) {
	ctx := testCtx(t)
	ns := newNamespace(ctx, t)
	k := testKeys
	node := newNode(ctx, t, map[string]string{k.RebootRequired(): contract.True, k.DriverVersion(): "1", k.DriverReady(): contract.True},
		map[string]string{k.RebootReason(): string(contract.ReasonUpgrade)})
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	s := newSim(t, ns, clk)
	s.SetTiming(Timing{Reboot: 10 * time.Second, DriverLoad: 4 * time.Second})
	pods := map[string]*corev1.Pod{}
	for _, name := range []string{"driver", "plugin", "exporter"} {
		pods[name] = stackPod(ctx, t, ns, node.Name, name, name == "driver", corev1.RestartPolicyAlways, "10.0.0.9")
	}
	startInformers(ctx, t, s)
	for _, p := range pods {
		catchUp(ctx, t, s, p)
	}
	catchUpNode(ctx, t, s, node)
	m := &machine{host: memhost.New(simhost.Spec{Chip: "910b", ChipCount: 8, Driver: "1"}, clk)}
	s.machines[node.Name] = m
	clk.Step(time.Hour) // past the uptime guard
	oldBoot, _ := m.host.BootID()

	sync := func(want time.Duration) *corev1.Node {
		t.Helper()
		after, err := s.sync(ctx, node.Name)
		if err != nil || after != want {
			t.Fatalf("pass: look again after %s, err %v; want after %s", after, err, want)
		}
		n, err := env.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		catchUpNode(ctx, t, s, n)
		for name := range pods {
			pods[name] = getPod(ctx, t, ns, name)
			catchUp(ctx, t, s, pods[name])
		}
		return n
	}

	// The rebooter records the reboot and runs it: the machine is down
	// for the reboot time. A conflict with the controller manager's own
	// writes to a new node is decided again on the newer node.
	var n *corev1.Node
	for attempt := 1; !m.host.RebootPending(); attempt++ {
		if attempt > 5 {
			t.Fatalf("no reboot in %d passes (%d conflicts)", attempt-1, s.Stats().Conflicts)
		}
		after, err := s.sync(ctx, node.Name)
		if err != nil || (m.host.RebootPending() && after != 10*time.Second) {
			t.Fatalf("reboot pass: look again after %s, err %v; want after the reboot time", after, err)
		}
		if n, err = env.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		catchUpNode(ctx, t, s, n)
	}
	if !m.host.RebootPending() || n.Annotations[k.RebootFromBootID()] != oldBoot {
		t.Fatalf("no reboot recorded and run: pending %v, annotations %v", m.host.RebootPending(), n.Annotations)
	}

	// One pass at boot: the kubelet's new boot ID and holds, the
	// rebooter's completion on the node the boot ID write returned, the
	// health-watch's boot probe; the driver load, started at the boot, is
	// what is left to wait for. The controller manager writes this node
	// too (it never reports Ready), and a completion that conflicts with
	// such a write lands in the pass's next round, on the node a later
	// write of the pass returned: on the cached node it would conflict
	// again and the marker would stay.
	clk.Step(10 * time.Second)
	n = sync(4 * time.Second)
	newBoot, _ := m.host.BootID()
	if n.Status.NodeInfo.BootID != newBoot || n.Labels[k.RebootRequired()] != "" || n.Annotations[k.RebootFromBootID()] != "" ||
		n.Annotations[k.RebootedFromBootID()] != oldBoot {
		t.Fatalf("after one pass at boot: boot ID %q (want %q), labels %v, annotations %v; want the boot reported and the reboot completed",
			n.Status.NodeInfo.BootID, newBoot, n.Labels, n.Annotations)
	}
	if n.Labels[k.DriverReady()] != contract.False || !held(pods["plugin"]) || !held(pods["exporter"]) {
		t.Fatalf("after one pass at boot: driver-ready %q, plugin held %v, exporter held %v", n.Labels[k.DriverReady()], held(pods["plugin"]), held(pods["exporter"]))
	}

	// One pass once the load completes: the driver entry's label, the
	// health-watch's driver-ready and the driver pod's start.
	clk.Step(4 * time.Second)
	n = sync(0)
	if n.Labels[k.DriverVersion()] != "2" || n.Labels[k.DriverReady()] != contract.True || !started(pods["driver"], m.restart.mark(), "10.0.0.9", clk.Now()) {
		t.Fatalf("after one pass at the load: driver-version %q, driver-ready %q, driver pod %+v", n.Labels[k.DriverVersion()], n.Labels[k.DriverReady()], pods["driver"].Status)
	}

	// The held pods wait for the driver pod's Ready as the cache shows it.
	sync(0)
	for _, name := range []string{"plugin", "exporter"} {
		if !started(pods[name], m.restart.mark(), "10.0.0.9", clk.Now()) {
			t.Fatalf("%s not started once the driver pod is Ready: %+v", name, pods[name].Status)
		}
	}
}

// newerRV: resourceVersion a is newer than b.
func newerRV(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}

// catchUpNode waits until the simulator's node cache holds n at the
// resourceVersion the API server gave it, or a later one (the controller
// manager writes nodes too).
func catchUpNode(ctx context.Context, t *testing.T, s *Sim, n *corev1.Node) {
	t.Helper()
	var seen string
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got, err := s.nodes.Get(n.Name)
		if err != nil {
			return false, nil //nolint:nilerr // not cached yet
		}
		seen = got.ResourceVersion
		return !newerRV(n.ResourceVersion, seen), nil
	})
	if err != nil {
		t.Fatalf("node %s: the simulator's cache has resourceVersion %q, the API server %q: %v", n.Name, seen, n.ResourceVersion, err)
	}
}
