package realnode_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/standin"
)

// kubeosRoot is the driver tree on KubeOS (seed 000: /var/lib/Ascend/
// driver/tools/npu-smi).
const kubeosRoot = "/var/lib/Ascend/driver"

// TestRealNodeReadOnlyRootDriver runs the chart with docs/examples/
// values-kubeos.yaml's profile (installMode tree, the tree in
// /var/lib/Ascend/driver) on a real node whose root is read-only apart
// from /var, /etc, /run and /tmp, as KubeOS mounts it:
//   - the vendor .run of run mode fails there (it writes /usr/local);
//   - tree mode installs (repairing what the .run left) and loads;
//   - an upgrade and a rollback each install on the drained node, with
//     one reboot that loads the new tree;
//   - a reboot outside the rollout (a recovery) loads the version
//     installed on disk, not the desired one.
func TestRealNodeReadOnlyRootDriver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	b, runImage := newTreeBed(ctx, t)
	profile := b.vals["driver"].(map[string]any)["profiles"].([]any)[0].(map[string]any)

	if !t.Run("run mode fails on a read-only root", func(t *testing.T) {
		b.t = t
		ev := b.waitEvent(ctx, string(contract.EventDriverInstallFailed), "Read-only file system")
		t.Logf("run mode: %s", ev.Message)
	}) {
		return
	}

	if !t.Run("tree mode installs and loads", func(t *testing.T) {
		b.t = t
		profile["installMode"] = "tree"
		b.since = time.Now().Truncate(time.Second)
		b.helmUpgrade(ctx, standinVersion, nil)
		b.waitLoaded(ctx, standinVersion, standinVersion)
		b.checkHalfInstalled(false)
		b.checkNothingUnderUsr()
	}) {
		return
	}
	_ = runImage

	if !t.Run("upgrade", func(t *testing.T) {
		b.t = t
		b.helmUpgrade(ctx, otherVersion, nil)
		boots := len(b.node.BootIDs())
		b.askReboot(ctx, otherVersion)
		b.waitUpgraded(ctx, otherVersion, boots)
	}) {
		return
	}

	if !t.Run("rollback", func(t *testing.T) {
		b.t = t
		b.helmUpgrade(ctx, standinVersion, nil)
		boots := len(b.node.BootIDs())
		b.askReboot(ctx, standinVersion)
		b.waitUpgraded(ctx, standinVersion, boots)
	}) {
		return
	}

	t.Run("a reboot outside the rollout loads the installed version", func(t *testing.T) {
		b.t = t
		b.helmUpgrade(ctx, otherVersion, nil)
		b.waitEvent(ctx, string(contract.EventDriverActivationPending), "driver "+otherVersion+" is installed once the rollout")
		boots := len(b.node.BootIDs())
		rebooted := time.Now().Truncate(time.Second)
		if err := b.node.Reboot(ctx); err != nil {
			t.Fatal(err)
		}
		if n := len(b.node.BootIDs()); n != boots+1 {
			t.Fatalf("%d boots after one reboot, had %d", n, boots)
		}
		b.waitEventSince(ctx, string(contract.EventDriverLoaded), "driver "+standinVersion+" loaded from the tree installed in "+kubeosRoot, rebooted)
		b.waitLoaded(ctx, standinVersion, otherVersion)
		if got := b.readVersionInfo(); got != standinVersion {
			t.Fatalf("version.info %q after a reboot outside the rollout; want the installed %s", got, standinVersion)
		}
	})
}

// newTreeBed is installBed on a read-only-root node, installed in run
// mode with the vendor .run (which fails there); it returns the run
// image for the record.
func newTreeBed(ctx context.Context, t *testing.T) (*installBed, v1.ImageIndex) {
	t.Helper()
	nsObj, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kubeos-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	const chips = 2
	model := standin.NewChips(standin.Model910B, chips)
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kit, err := standin.BuildKit(ctx, root, filepath.Join(dir, "a"), standinVersion, standin.Model910B)
	if err != nil {
		t.Fatal(err)
	}
	node, err := env.AddRealNode(ctx, testbed.NodeSpec{Prefix: "kubeos", Chip: "910b", ChipCount: chips, OS: "oe2403sp3", Labels: map[string]string{fleetLabel: ns}},
		testbed.RealNodeOptions{ReadOnlyRoot: true, Insmod: kit.Insmod()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopNode(t, node) })
	u, err := kit.UserSpace(standin.Model910B)
	if err != nil {
		t.Fatal(err)
	}
	other, err := standin.BuildUserSpace(ctx, filepath.Join(dir, "b"), otherVersion, standin.Model910B)
	if err != nil {
		t.Fatal(err)
	}
	b := &installBed{t: t, ns: ns, node: node, images: map[string]v1.ImageIndex{}, generations: map[string]int64{}, root: kubeosRoot}
	for v, us := range map[string]*standin.UserSpace{standinVersion: u, otherVersion: other} {
		if b.images[v], err = us.DriverTreeImage(node.KernelRelease(), nil); err != nil {
			t.Fatal(err)
		}
	}
	runImage, err := u.DriverImage()
	if err != nil {
		t.Fatal(err)
	}
	testbed.WaitNode(ctx, t, env.Client, node.Name(), "Ready", nodeReady)
	prepareHost(ctx, t, node, u, model)
	b.vals = map[string]any{
		"namespace":       ns,
		"npuNodeSelector": map[string]any{fleetLabel: ns},
		"driver": map[string]any{"version": standinVersion, "upgradePolicy": map[string]any{"autoUpgrade": false},
			"hostDriverPath":        kubeosRoot,
			"profiles":              []any{map[string]any{"name": "910b", "chip": "910b", "kernel": node.KernelRelease(), "os": "oe2403sp3", "installMode": "run"}},
			"installTimeoutSeconds": 60, "terminationGracePeriodSeconds": 120,
			"installRetry": map[string]any{"initialSeconds": 2, "maxSeconds": 4}},
		"devicePlugin": map[string]any{"dataTraceHostPath": "/var/lib/mindx/datatrace-config"},
		"rebooter":     map[string]any{"uptimeGuardMinutes": 0},
		"hooks":        map[string]any{"preflight": map[string]any{"enabled": false}, "resume": map[string]any{"enabled": false}},
	}
	images := renderedImages(ctx, t, ns, b.vals)
	for ds, build := range map[string]func() (v1.ImageIndex, error){"device-plugin": kit.DevicePluginImage, "exporter": kit.ExporterImage} {
		img, err := build()
		if err != nil {
			t.Fatal(err)
		}
		b.push(ctx, images[ds], img)
	}
	b.since = time.Now().Add(-time.Minute)
	b.push(ctx, images["driver-910b"], runImage)
	if _, err := env.Helm(ns).Install(ctx, ns, b.vals, testbed.InstallOptions{DisableHooks: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logPods(t, ns)
		}
		_ = env.Helm(ns).Uninstall(ns)
		_ = env.Client.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), "mindx-dl-deviceinfo-"+node.Name(), metav1.DeleteOptions{})
	})
	return b, runImage
}

// waitLoaded waits until the node runs loaded with installed on disk,
// ready, its chips allocatable and the stack running.
func (b *installBed) waitLoaded(ctx context.Context, loaded, desired string) {
	t := b.t
	t.Helper()
	resource := corev1.ResourceName("huawei.com/Ascend910")
	testbed.WaitNode(ctx, t, env.Client, b.node.Name(), fmt.Sprintf("driver %s loaded (desired %s), ready, 2 chips", loaded, desired), func(n *corev1.Node) bool {
		q := n.Status.Allocatable[resource]
		return n.Labels[keys.DriverVersion()] == loaded && n.Labels[keys.DriverReady()] == contract.True &&
			n.Annotations[keys.InstalledDriver()] == loaded && q.Value() == 2
	})
	mods, err := b.node.LoadedModules()
	if err != nil || !slices.Contains(mods, "drv_pcie_host") || !slices.Contains(mods, "drv_seclib_host") {
		t.Fatalf("modules on %s: %v, %v", b.node.Name(), mods, err)
	}
	waitStackRunning(ctx, t, b.node)
}

// checkNothingUnderUsr checks that the node's read-only /usr holds only
// what the image had (the stand-in insmod) and that no module went to
// /lib/modules.
func (b *installBed) checkNothingUnderUsr() {
	b.t.Helper()
	for _, p := range []string{"/usr/local/Ascend", "/usr/local/dcmi", "/usr/local/bin/npu-smi", "/lib/modules/" + b.node.KernelRelease() + "/updates"} {
		if _, err := os.Stat(b.node.Path(p)); !errors.Is(err, fs.ErrNotExist) {
			b.t.Errorf("%s on the read-only root of %s: %v", p, b.node.Name(), err)
		}
	}
	info, err := os.ReadFile(b.node.Path("/etc/ascend_install.info"))
	if err != nil || !strings.Contains(string(info), "Driver_Install_Path_Param=/var/lib/Ascend\n") || !strings.Contains(string(info), "Driver_Install_Status=complete") {
		b.t.Errorf("/etc/ascend_install.info on %s: %v %q", b.node.Name(), err, info)
	}
}

// waitEventSince waits for an Event of reason whose message holds substr,
// last seen at or after since.
func (b *installBed) waitEventSince(ctx context.Context, reason, substr string, since time.Time) {
	b.t.Helper()
	err := testbed.WaitFor(ctx, eventsLW(b.node.Name()), &corev1.Event{}, func(evs []*corev1.Event) (bool, error) {
		for _, e := range evs {
			last := e.LastTimestamp.Time
			if e.EventTime.After(last) {
				last = e.EventTime.Time
			}
			if e.Reason == reason && strings.Contains(e.Message, substr) && !last.Before(since) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		b.t.Fatalf("no %s event on node %s since %s containing %q: %v", reason, b.node.Name(), since, substr, err)
	}
}

func (b *installBed) readVersionInfo() string {
	b.t.Helper()
	info, err := os.ReadFile(b.node.Path(b.driverRoot() + "/version.info"))
	if err != nil {
		b.t.Fatal(err)
	}
	v, _, _ := strings.Cut(strings.TrimPrefix(strings.SplitN(string(info), "\n", 2)[0], "Version="), "\n")
	return v
}
