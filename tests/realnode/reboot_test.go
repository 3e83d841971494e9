package realnode_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/realnode"
)

var keys = contract.Keys{Domain: contract.DefaultDomain}

// fleetLabel selects this test's node: the chart's npuNodeSelector.
const fleetLabel = "npu-stack.test/fleet"

// installerModules are module files as the driver installer leaves them
// in /lib/modules/<kernel>/updates (docs/host-contract.md, section 2;
// names from section 1).
var installerModules = []string{"drv_pcie_host", "drv_pcie_hdc_host", "asdrv_dms"}

// TestRealNodeRebootThroughSystemBus runs the chart's rebooter (its
// DaemonSet as rendered: securityContext, the host's /run/dbus directory)
// on a real 910B node whose host root follows the host contract, and has
// it reboot the node: its StartUnit("reboot.target") reaches the node's
// stand-in systemd over the node's own dbus-daemon; the node reboots once
// (one new boot ID), the modules the installer left are loaded with the
// driver's device nodes, the kubelet re-registers Ready with the new boot
// ID, and the rebooter, started again by the kubelet, reads the new boot
// ID in its container and completes the reboot. The node's dbus-daemon
// is restarted under the running rebooter first, so the rebooter reaches
// the new socket through its /run/dbus directory mount. The stand-in
// systemd refuses what systemd would refuse, and the node leaves nothing
// behind.
func TestRealNodeRebootThroughSystemBus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	nsObj, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "realreboot-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	node, err := env.AddRealNode(ctx, testbed.NodeSpec{Prefix: "realreboot", Chip: "910b", ChipCount: 2, Labels: map[string]string{fleetLabel: ns}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, node, "kubelet", "containerd", "dbus")
		}
		if !stopped {
			_ = node.Stop()
		}
	})
	first := node.BootIDs()[0]
	testbed.WaitNode(ctx, t, env.Client, node.Name(), "Ready with its own boot ID", func(n *corev1.Node) bool {
		return nodeReady(n) && n.Status.NodeInfo.BootID == first
	})
	checkFreshHostRoot(ctx, t, node, first)
	checkSystemdRefusals(ctx, t, node)

	// What the driver installer leaves: its modules, loaded on the next
	// boot. And a wedged chip, which the reboot heals.
	layModules(t, node)
	if err := node.SetChipHealth(1, "Critical"); err != nil {
		t.Fatal(err)
	}
	// A reboot empties /run (npu-stack's markers live there) and keeps
	// the disk.
	for _, p := range []string{"/run/npu-stack/driver-ready", "/var/lib/npu-stack-probe/kept"} {
		if err := os.MkdirAll(filepath.Dir(node.Path(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(node.Path(p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vals := map[string]any{
		"namespace":       ns,
		"npuNodeSelector": map[string]any{fleetLabel: ns},
		"driver":          map[string]any{"enabled": false, "upgradePolicy": map[string]any{"autoUpgrade": false}},
		"devicePlugin":    map[string]any{"enabled": false},
		"exporter":        map[string]any{"enabled": false},
		"cdi":             map[string]any{"enabled": false},
		"hooks":           map[string]any{"resume": map[string]any{"enabled": false}},
		"rebooter":        map[string]any{"uptimeGuardMinutes": 0, "metricsPort": 0},
	}
	if _, err := env.Helm(ns).Install(ctx, ns, vals, testbed.InstallOptions{DisableHooks: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logRebooter(t, ns)
		}
	})
	waitRebooterRunning(ctx, t, ns, node.Name())
	checkRebooterContainer(ctx, t, node)
	restartBus(ctx, t, node)

	change := kube.NodeChange{
		Labels:      map[string]*string{keys.RebootRequired(): kube.Set(contract.True)},
		Annotations: map[string]*string{keys.RebootReason(): kube.Set(string(contract.ReasonUpgrade)), keys.ApproveReboot(): kube.Set(contract.True)},
	}
	if _, err := kube.PatchNode(ctx, env.Client, node.Name(), change); err != nil {
		t.Fatal(err)
	}
	after := testbed.WaitNode(ctx, t, env.Client, node.Name(), "rebooted, marker cleared by the rebooter", func(n *corev1.Node) bool {
		_, marked := n.Labels[keys.RebootRequired()]
		return !marked && n.Annotations[keys.RebootedFromBootID()] == first && n.Status.NodeInfo.BootID != first
	})
	ids := node.BootIDs()
	if len(ids) != 2 || node.RebootJobs() != 1 {
		t.Fatalf("node %s: boot IDs %v after %d reboot.target jobs; want 2 boot IDs after 1 job", node.Name(), ids, node.RebootJobs())
	}
	if err := node.RebootErr(); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	if after.Status.NodeInfo.BootID != ids[1] {
		t.Errorf("kubelet reports boot ID %s, the node booted with %s", after.Status.NodeInfo.BootID, ids[1])
	}
	// The rebooter read both boot IDs in its container: the node's, not
	// the machine kernel's.
	testbed.WaitNodeEvent(ctx, t, env.Client, node.Name(), string(contract.EventRebootCompleted), "boot ID "+first+" -> "+ids[1])
	testbed.WaitNode(ctx, t, env.Client, node.Name(), "Ready after the reboot", nodeReady)
	checkDriverLoaded(t, node)
	if _, err := os.Stat(node.Path("/run/npu-stack/driver-ready")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/run/npu-stack/driver-ready after the reboot: %v; want /run emptied", err)
	}
	if _, err := os.Stat(node.Path("/var/lib/npu-stack-probe/kept")); err != nil {
		t.Errorf("a file of the node's disk after the reboot: %v", err)
	}
	if c, err := node.Chips(); err != nil || c.Chips[1].Health != "OK" {
		t.Errorf("chips after the reboot %+v, %v; want chip 1 healed", c, err)
	}
	t.Logf("rebooted %s: boot ID %s -> %s", node.Name(), first, ids[1])

	stopped = true
	stopClean(t, node)
	t.Logf("test wall time %s", time.Since(start).Round(time.Second))
}

// TestRealNodeDriverPreinstalled: a node whose driver was installed
// before its first boot (the FirstBoot hook lays the installer's modules)
// boots with the driver loaded and its device nodes, and runs pods.
func TestRealNodeDriverPreinstalled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, err := env.AddRealNode(ctx, testbed.NodeSpec{Prefix: "preinstalled", Chip: "910b", ChipCount: 2}, testbed.RealNodeOptions{
		FirstBoot: func(_ context.Context, n *realnode.Node) error {
			layModules(t, n)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Stop() })
	testbed.WaitNode(ctx, t, env.Client, node.Name(), "Ready", func(n *corev1.Node) bool {
		return nodeReady(n) && n.Status.NodeInfo.BootID == node.BootIDs()[0] && n.Status.NodeInfo.KernelVersion == node.KernelRelease()
	})
	checkDriverLoaded(t, node)
	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	if left, err := node.Leftovers(); err != nil || len(left) > 0 {
		t.Errorf("node %s left behind: %v %v", node.Name(), left, err)
	}
}

// layModules writes the module files the driver installer leaves in
// /lib/modules/<kernel>/updates.
func layModules(t *testing.T, node *realnode.Node) {
	t.Helper()
	for _, m := range installerModules {
		if err := os.WriteFile(node.Path(filepath.Join(node.ModulesDir(), m+".ko")), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkFreshHostRoot: before any install the node has its own boot ID at
// the kernel's path, no modules, no device nodes, an empty
// /lib/modules/<kernel>/updates for the installer, and its chips.
func checkFreshHostRoot(ctx context.Context, t *testing.T, node *realnode.Node, bootID string) {
	t.Helper()
	out, err := node.Command(ctx, "cat", "/proc/sys/kernel/random/boot_id").Output()
	if got := strings.TrimSpace(string(out)); err != nil || got != bootID {
		t.Errorf("boot ID in the node = %q, %v; want %s", got, err, bootID)
	}
	machine, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil || strings.TrimSpace(string(machine)) == bootID {
		t.Errorf("the node's boot ID %s is the machine's (%v)", bootID, err)
	}
	if mods, err := node.LoadedModules(); err != nil || len(mods) != 0 {
		t.Errorf("modules loaded before any install: %v, %v", mods, err)
	}
	for _, p := range []string{"/dev/davinci0", "/dev/.npu-stack-testbed/chips.json"} {
		if _, err := os.Stat(node.Path(p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s before any install: %v", p, err)
		}
	}
	if _, err := os.Stat(node.Path(node.ModulesDir())); err != nil {
		t.Errorf("the installer's module directory: %v", err)
	}
	if c, err := node.Chips(); err != nil || c.Model != "910B" || len(c.Chips) != 2 {
		t.Errorf("chips.json = %+v, %v; want two 910B chips", c, err)
	}
}

// checkDriverLoaded: after the reboot the installer's modules are loaded
// and the driver's device nodes are character devices, mode 0666.
func checkDriverLoaded(t *testing.T, node *realnode.Node) {
	t.Helper()
	mods, err := node.LoadedModules()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(mods)
	want := slices.Sorted(slices.Values(installerModules))
	if !slices.Equal(mods, want) {
		t.Errorf("loaded modules after the reboot %v, want %v", mods, want)
	}
	for _, d := range []string{"davinci0", "davinci1", "davinci_manager", "devmm_svm", "hisi_hdc"} {
		st, err := os.Stat(node.Path("/dev/" + d))
		if err != nil {
			t.Errorf("/dev/%s: %v", d, err)
			continue
		}
		if st.Mode()&os.ModeCharDevice == 0 || st.Mode().Perm() != 0o666 {
			t.Errorf("/dev/%s: mode %v, want a character device 0666", d, st.Mode())
		}
	}
	if _, err := os.Stat(node.Path("/dev/davinci2")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/dev/davinci2 on a node with 2 chips: %v", err)
	}
	if b, err := os.ReadFile(node.Path("/dev/.npu-stack-testbed/chips.json")); err != nil || !strings.Contains(string(b), `"910B"`) {
		t.Errorf("chips.json beside the device nodes: %s, %v", b, err)
	}
	if mods, err := node.Command(context.Background(), "ls", "/sys/module").Output(); err != nil || strings.Fields(string(mods))[0] != "asdrv_dms" {
		t.Errorf("ls /sys/module in the node: %q, %v", mods, err)
	}
}

// checkSystemdRefusals asks the node's systemd, over its bus, for what it
// refuses as systemd does: an unknown unit, a bad job mode, and a reboot
// asked by a caller that is not root (dbus-send in the node as nobody).
// None of them reboots the node.
func checkSystemdRefusals(ctx context.Context, t *testing.T, node *realnode.Node) {
	t.Helper()
	conn, err := dbus.Dial("unix:path=" + node.Path("/run/dbus/system_bus_socket"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.Auth(nil); err != nil {
		t.Fatal(err)
	}
	if err := conn.Hello(); err != nil {
		t.Fatal(err)
	}
	systemd := conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
	for _, c := range []struct{ unit, mode, errName string }{
		{"nginx.service", "replace", "org.freedesktop.systemd1.NoSuchUnit"},
		{"reboot.target", "now", "org.freedesktop.DBus.Error.InvalidArgs"},
	} {
		err := systemd.CallWithContext(ctx, "org.freedesktop.systemd1.Manager.StartUnit", 0, c.unit, c.mode).Err
		var derr dbus.Error
		if !errors.As(err, &derr) || derr.Name != c.errName {
			t.Errorf("StartUnit(%q, %q) = %v, want %s", c.unit, c.mode, err, c.errName)
		}
	}
	err = systemd.CallWithContext(ctx, "org.freedesktop.systemd1.Manager.PowerOff", 0).Err
	if derr := (dbus.Error{}); !errors.As(err, &derr) || derr.Name != "org.freedesktop.DBus.Error.UnknownMethod" {
		t.Errorf("PowerOff() = %v, want UnknownMethod", err)
	}
	out, err := node.Command(ctx, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"dbus-send", "--system", "--print-reply", "--dest=org.freedesktop.systemd1", "/org/freedesktop/systemd1",
		"org.freedesktop.systemd1.Manager.StartUnit", "string:reboot.target", "string:replace-irreversibly").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "org.freedesktop.DBus.Error.AccessDenied") {
		t.Errorf("StartUnit(reboot.target) as nobody: %v, %s; want AccessDenied", err, out)
	}
	if n := node.RebootJobs(); n != 0 {
		t.Errorf("%d reboot jobs after refused requests", n)
	}
}

// checkRebooterContainer reads the OCI spec containerd gave runc for the
// rebooter container (crictl inspect on the node): the chart's
// securityContext and its /run/dbus directory mount, as rendered.
func checkRebooterContainer(ctx context.Context, t *testing.T, node *realnode.Node) {
	t.Helper()
	id, err := node.Crictl(ctx, "ps", "-q", "--name", "^rebooter$")
	if err != nil || len(strings.Fields(string(id))) != 1 {
		t.Fatalf("rebooter container on %s: %q, %v", node.Name(), id, err)
	}
	out, err := node.Crictl(ctx, "inspect", strings.TrimSpace(string(id)))
	if err != nil {
		t.Fatal(err)
	}
	var inspect struct {
		Info struct {
			RuntimeSpec struct {
				Process struct {
					User struct {
						UID int `json:"uid"`
					} `json:"user"`
					Capabilities struct {
						Effective []string `json:"effective"`
					} `json:"capabilities"`
					NoNewPrivileges bool `json:"noNewPrivileges"`
				} `json:"process"`
				Root struct {
					Readonly bool `json:"readonly"`
				} `json:"root"`
				Mounts []struct {
					Destination string   `json:"destination"`
					Source      string   `json:"source"`
					Options     []string `json:"options"`
				} `json:"mounts"`
			} `json:"runtimeSpec"`
		} `json:"info"`
	}
	if err := json.Unmarshal(out, &inspect); err != nil {
		t.Fatalf("crictl inspect: %v", err)
	}
	spec := inspect.Info.RuntimeSpec
	if spec.Process.User.UID != 0 || len(spec.Process.Capabilities.Effective) != 0 || !spec.Process.NoNewPrivileges || !spec.Root.Readonly {
		t.Errorf("rebooter runs as uid %d with capabilities %v, noNewPrivileges %v, read-only root %v; want the chart's uid 0, no capability, no privilege escalation, read-only root",
			spec.Process.User.UID, spec.Process.Capabilities.Effective, spec.Process.NoNewPrivileges, spec.Root.Readonly)
	}
	dbusMount := false
	for _, m := range spec.Mounts {
		if m.Destination == "/run/dbus" {
			dbusMount = m.Source == "/run/dbus" && slices.Contains(m.Options, "ro")
		}
	}
	if !dbusMount {
		t.Errorf("rebooter's mounts %+v: want the node's directory /run/dbus read-only at /run/dbus", spec.Mounts)
	}
}

func waitRebooterRunning(ctx context.Context, t *testing.T, ns, nodeName string) {
	t.Helper()
	var last string
	err := testbed.WaitFor(ctx, testbed.PodsLW(env.Client, ns, "app.kubernetes.io/component=rebooter"), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			last = p.Name + " " + string(p.Status.Phase)
			for _, cs := range p.Status.ContainerStatuses {
				if w := cs.State.Waiting; w != nil {
					last += " " + cs.Name + ": " + w.Reason + " " + w.Message
				}
				if p.Spec.NodeName == nodeName && cs.State.Running != nil {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("rebooter running on %s: %v (last: %s)", nodeName, err, last)
	}
}

func logRebooter(t *testing.T, ns string) {
	pods, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=rebooter"})
	if err != nil {
		t.Log(err)
		return
	}
	for _, p := range pods.Items {
		for _, prev := range []bool{true, false} {
			b, err := env.Client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "rebooter", Previous: prev}).DoRaw(context.Background())
			t.Logf("rebooter %s (previous %v): %v\n%s", p.Name, prev, err, b)
		}
	}
}

func dumpLogs(t *testing.T, node *realnode.Node, daemons ...string) {
	for _, d := range daemons {
		b, _ := os.ReadFile(node.LogPath(d))
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		t.Logf("%s log of %s (end):\n%s", d, node.Name(), b)
	}
}

// restartBus restarts the node's dbus-daemon under the running rebooter,
// as an OS update or `systemctl restart dbus` does, and checks that the
// socket file is a new one: a rebooter that bind-mounted the old socket
// file (not the directory /run/dbus) can no longer reach the bus
// (finding 5 of the host contract issue).
func restartBus(ctx context.Context, t *testing.T, node *realnode.Node) {
	t.Helper()
	sock := node.Path("/run/dbus/system_bus_socket")
	before, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.RestartBus(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(before, after) || after.Mode()&os.ModeSocket == 0 {
		t.Fatalf("%s after a dbus restart: mode %v, same file %v; want a new socket", sock, after.Mode(), os.SameFile(before, after))
	}
}
