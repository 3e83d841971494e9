package health_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// A fresh node gets the desired driver installed, the device plugin's gate
// opens and writes a CDI spec; a wedge is detected within threshold probes
// and reported the way the rebooter and the admin read it; a restarted
// watch keeps the wedge; chips that heal before any reboot undo it all.
func TestWedgeDetectedKeptAcrossRestartAndUndoneOnRecovery(t *testing.T) {
	const interval, threshold = 1, 3
	f := newFleet(t, fleetOptions{nodes: 1, probeInterval: interval, threshold: threshold, devicePlugin: true})
	node := f.nodes[0]
	ctx := ctxTimeout(t, 3*time.Minute)

	waitNode(ctx, t, node.Name(), "driver installed and ready", healthy(desiredVersion))
	if st, _ := node.Host().State(); st.Installs != 1 || st.LoadedDriver != desiredVersion {
		t.Fatalf("fresh boot: installs %d loaded %q; want 1 install of %s", st.Installs, st.LoadedDriver, desiredVersion)
	}
	f.driverPod(ctx, node, "Ready", podReady)

	// The device plugin's init containers: validate --wait, then cdi generate.
	waitPods(ctx, t, f.ns, pluginSelector, "device plugin running", podRunning)
	spec, err := cdiapi.ReadSpec(node.Host().Path("/var/run/cdi/huawei-com-npu.yaml"), 0)
	if err != nil {
		t.Fatalf("CDI spec on the node: %v", err)
	}
	if len(spec.Devices) != 6 || spec.GetDevice("3") == nil || spec.GetDevice("driver") == nil {
		t.Fatalf("CDI spec devices %d, want 4 chips, all and the driver's user space (driver)", len(spec.Devices))
	}

	// Wedge: within threshold intervals + 1 s, everything is in place.
	start := time.Now()
	if err := node.Host().Wedge(2); err != nil {
		t.Fatal(err)
	}
	deadline, cancel := context.WithTimeout(ctx, threshold*interval*time.Second+time.Second)
	defer cancel()
	waitNode(deadline, t, node.Name(), "wedge reported", wedged)
	eventually(deadline, t, "marker removed", func() bool { _, ok, _ := markers(node).Ready(); return !ok })
	waitEvent(deadline, t, node.Name(), contract.EventChipWedged, "reason=recovery")
	waitEvent(deadline, t, node.Name(), contract.EventRebootRequired, "reason=recovery")
	t.Logf("wedge fully reported %s after injection", time.Since(start).Round(time.Millisecond))
	f.driverPod(ctx, node, "NotReady (readiness probe: validate --marker-only)", func(p *corev1.Pod) bool { return podRunning(p) && !podReady(p) })

	// The watch restarts (its pod is replaced): it reads the wedge from the
	// node and the marker directory instead of assuming health.
	old := f.driverPod(ctx, node, "running", podRunning)
	if err := env.Client.CoreV1().Pods(f.ns).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := f.driverPod(ctx, node, "replaced and running", func(p *corev1.Pod) bool { return p.UID != old.UID && podRunning(p) })
	eventually(ctx, t, "new watch probed the wedged chip", func() bool {
		return strings.Contains(node.Logs(f.ns, fresh.Name, "watch"), "chip probe failed")
	})
	n, err := env.Client.CoreV1().Nodes().Get(ctx, node.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := markers(node).Ready(); ok || !wedged(n) || countEvents(t, node.Name(), contract.EventChipRecovered) != 0 {
		t.Fatalf("after restart: marker %v, labels %v annotations %v; want the wedge kept", ok, n.Labels, n.Annotations)
	}
	if st, _ := node.Host().State(); st.Installs != 1 {
		t.Fatalf("the replaced driver pod reinstalled the driver: %d installs", st.Installs)
	}
	if podReady(fresh) {
		t.Fatal("replaced driver pod Ready on wedged chips")
	}

	// No reboot comes (no rebooter): the chips heal, the watch undoes it.
	heal(t, node)
	waitNode(ctx, t, node.Name(), "recovered", healthy(desiredVersion))
	waitEvent(ctx, t, node.Name(), contract.EventChipRecovered, "reason=recovery withdrawn")
	eventually(ctx, t, "marker restored", func() bool { v, ok, _ := markers(node).Ready(); return ok && v == desiredVersion })
	f.driverPod(ctx, node, "Ready again", podReady)
}

// A chip that fails twice and recovers (threshold 3) leaves no trace.
func TestBriefFailureBelowThresholdLeavesNoTrace(t *testing.T) {
	// A 2 s interval gives the test a whole interval to heal the chip
	// after seeing the second failure.
	f := newFleet(t, fleetOptions{nodes: 1, probeInterval: 2, threshold: 3})
	node := f.nodes[0]
	ctx := ctxTimeout(t, 3*time.Minute)
	waitNode(ctx, t, node.Name(), "driver ready", healthy(desiredVersion))

	if err := node.Host().Wedge(0); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "two failed probes", func() bool { return strings.Contains(f.logs(node, "watch"), "failures=2") })
	heal(t, node)
	eventually(ctx, t, "probe passing again", func() bool {
		return strings.Contains(f.logs(node, "watch"), "passed again below the failure threshold")
	})

	n, err := env.Client.CoreV1().Nodes().Get(ctx, node.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !healthy(desiredVersion)(n) {
		t.Fatalf("labels %v annotations %v after a brief failure", n.Labels, n.Annotations)
	}
	if _, ok, _ := markers(node).Ready(); !ok {
		t.Fatal("marker removed after a brief failure")
	}
	if w, _ := markers(node).Wedged(); w {
		t.Fatal("wedge recorded after a brief failure")
	}
	for _, r := range []contract.EventReason{contract.EventChipWedged, contract.EventRebootRequired, contract.EventChipRecovered} {
		if c := countEvents(t, node.Name(), r); c != 0 {
			t.Fatalf("%d %s events after a brief failure", c, r)
		}
	}
}

// With another driver loaded the gate records it and idles Ready without
// installing. Once the rollout has drained the node and asks for its
// reboot, the driver pod installs the desired version over the loaded one,
// which stays loaded and reported, and records the install; the reboot
// loads the installed version and the pod installs nothing more.
func TestDriverEntryNeverUnloadsAndUpgradesOnReboot(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 1, loaded: previousVersion, probeInterval: 1, threshold: 3})
	node := f.nodes[0]
	ctx := ctxTimeout(t, 3*time.Minute)

	waitNode(ctx, t, node.Name(), "old driver recorded and ready", healthy(previousVersion))
	f.driverPod(ctx, node, "Ready on the old driver", podReady)
	if st, _ := node.Host().State(); st.Installs != 0 || st.LoadedDriver != previousVersion {
		t.Fatalf("installs %d loaded %q: the gate touched a running driver", st.Installs, st.LoadedDriver)
	}
	if v, _, _ := markers(node).Ready(); v != previousVersion {
		t.Fatalf("marker holds %q, want the loaded %s", v, previousVersion)
	}
	waitEvent(ctx, t, node.Name(), contract.EventDriverActivationPending, desiredVersion+" is installed once the rollout has drained the node")
	if logs := f.logs(node, "driver"); !strings.Contains(logs, "until the rollout drains this node and asks for its reboot") {
		t.Fatalf("driver log does not say when the new version is installed:\n%s", logs)
	}

	// The rollout's reboot request, as it writes it after the drain.
	inReboot := map[string]*string{keys.UpgradeState(): kube.Set(string(contract.StateRebootRequired)), keys.RebootRequired(): kube.Set(contract.True)}
	if _, err := kube.PatchNode(ctx, env.Client, node.Name(), kube.NodeChange{Labels: inReboot}); err != nil {
		t.Fatal(err)
	}
	n := waitNode(ctx, t, node.Name(), "desired version installed", func(n *corev1.Node) bool { return n.Annotations[keys.InstalledDriver()] == desiredVersion })
	if st, _ := node.Host().State(); st.Installs != 1 || st.LoadedDriver != previousVersion || st.InstalledDriver != desiredVersion || n.Labels[keys.DriverVersion()] != previousVersion {
		t.Fatalf("after the install on the drained node: host %+v, label %q; want %s still loaded and reported, %s installed", st, n.Labels[keys.DriverVersion()], previousVersion, desiredVersion)
	}
	waitEvent(ctx, t, node.Name(), contract.EventDriverActivationPending, "driver "+desiredVersion+" installed on the drained node")

	// The reboot, after which the rollout and the rebooter clear the request.
	before, _ := node.Host().BootID()
	old := f.driverPod(ctx, node, "running", podRunning)
	if _, err := kube.PatchNode(ctx, env.Client, node.Name(), kube.NodeChange{Labels: map[string]*string{keys.UpgradeState(): nil, keys.RebootRequired(): nil}}); err != nil {
		t.Fatal(err)
	}
	if err := node.Host().Reboot(ctx, "systemd"); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, node.Name(), "new driver after reboot", func(n *corev1.Node) bool {
		return healthy(desiredVersion)(n) && n.Status.NodeInfo.BootID != before
	})
	st, _ := node.Host().State()
	if st.Installs != 1 || st.LoadedDriver != desiredVersion || st.Reboots != 1 {
		t.Fatalf("after reboot: %+v; want %s loaded by the boot and no second install", st, desiredVersion)
	}
	p := f.driverPod(ctx, node, "Ready after reboot", func(p *corev1.Pod) bool { return podReady(p) && restarted(p) })
	if p.UID != old.UID {
		t.Logf("driver pod replaced during the reboot (%s -> %s)", old.Name, p.Name)
	}
}

func restarted(p *corev1.Pod) bool {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == "driver" {
			return c.RestartCount > 0
		}
	}
	return false
}

func waitPods(ctx context.Context, t *testing.T, ns, selector, what string, cond func(*corev1.Pod) bool) {
	t.Helper()
	lw := testbed.PodsLW(env.Client, ns, selector)
	if err := waitAll(ctx, lw, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// A fault no reboot fixes, in the order that once left a node wedged and
// cordoned for good: after the reboot the watch records this boot's wedge
// while the previous boot's recovery request is still on the Node, and
// only then does the rebooter clear that request as done. The watch must
// ask again (the rebooter's loop guard then decides), not sit on a wedge
// nobody will act on.
func TestStickyWedgeAskedForAgainAfterTheRequestIsCleared(t *testing.T) {
	const threshold = 2
	f := newFleet(t, fleetOptions{nodes: 1, probeInterval: 1, threshold: threshold})
	node := f.nodes[0]
	ctx := ctxTimeout(t, 3*time.Minute)
	waitNode(ctx, t, node.Name(), "driver ready", healthy(desiredVersion))

	if err := node.Host().Update(func(st *simhost.State) error { st.StickyWedge = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := node.Host().Wedge(1); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, node.Name(), "wedge reported", wedged)

	// The reboot the rebooter would run; the request stays on the Node.
	before, _ := node.Host().BootID()
	if err := node.Host().Reboot(ctx, "systemd"); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, node.Name(), "rebooted", func(n *corev1.Node) bool { return n.Status.NodeInfo.BootID != before })
	eventually(ctx, t, "wedge recorded again in the new boot", func() bool { w, _ := markers(node).Wedged(); return w })
	requested := countEvents(t, node.Name(), contract.EventRebootRequired)

	// What the rebooter does when it sees the boot ID changed.
	if _, err := kube.PatchNode(ctx, env.Client, node.Name(), kube.NodeChange{
		Labels: map[string]*string{keys.RebootRequired(): nil}, Annotations: map[string]*string{keys.RebootReason(): nil},
	}); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, node.Name(), "recovery requested again", wedged)
	waitEvent(ctx, t, node.Name(), contract.EventChipWedged, "reboot requested again with reason=recovery")
	waitEvent(ctx, t, node.Name(), contract.EventRebootRequired, "no reboot is pending")
	if got := countEvents(t, node.Name(), contract.EventRebootRequired); got != requested+1 {
		t.Errorf("%d RebootRequired events after the request was cleared, want %d", got, requested+1)
	}
}
