package realnode_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
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
//   - run mode refuses there, naming tree mode (the .run writes
//     /usr/local);
//   - tree mode installs (repairing what the .run left) and loads;
//   - an upgrade and a rollback each install on the drained node, with
//     one reboot that loads the new tree;
//   - a reboot outside the rollout (a recovery) loads the version
//     installed on disk, not the desired one.
func TestRealNodeReadOnlyRootDriver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	b := newTreeBed(ctx, t)
	profile := b.vals["driver"].(map[string]any)["profiles"].([]any)[0].(map[string]any)

	if !t.Run("run mode fails on a read-only root", func(t *testing.T) {
		b.t = t
		ev := b.waitEvent(ctx, string(contract.EventDriverInstallFailed), "set the profile's installMode: tree")
		t.Logf("run mode: %s", ev.Message)
	}) {
		return
	}

	if !t.Run("tree mode installs and loads", func(t *testing.T) {
		b.t = t
		// A tree image is another image than the .run's: a tag of its own.
		profile["installMode"] = "tree"
		b.vals["driver"].(map[string]any)["tagTemplate"] = "{{ .version }}-{{ .chip }}-{{ .kernel }}-{{ .os }}-tree"
		b.since = time.Now().Truncate(time.Second)
		b.helmUpgrade(ctx, standinVersion, nil)
		b.waitLoaded(ctx, standinVersion, standinVersion)
		b.checkHalfInstalled(false)
		b.checkNothingUnderUsr()
	}) {
		return
	}

	for _, step := range []struct{ name, version string }{{"upgrade", otherVersion}, {"rollback", standinVersion}} {
		if !t.Run(step.name, func(t *testing.T) {
			b.t = t
			b.helmUpgrade(ctx, step.version, nil)
			boots := len(b.node.BootIDs())
			b.askReboot(ctx, step.version)
			b.waitUpgraded(ctx, step.version, boots)
		}) {
			return
		}
	}

	t.Run("a recovery reboot loads the installed version, not the desired", func(t *testing.T) {
		b.t = t
		// A new version is desired but not rolled out when a chip wedges.
		b.helmUpgrade(ctx, otherVersion, map[string]any{"probeIntervalSeconds": 5, "failureThreshold": 2})
		b.waitEvent(ctx, string(contract.EventDriverActivationPending), "driver "+otherVersion+" is installed once the rollout")
		boots := len(b.node.BootIDs())
		if err := b.node.SetChipHealth(1, "Critical"); err != nil {
			t.Fatal(err)
		}
		testbed.WaitNode(ctx, t, env.Client, b.node.Name(), "recovery reboot asked for", func(n *corev1.Node) bool {
			return n.Labels[keys.RebootRequired()] == contract.True && n.Annotations[keys.RebootReason()] == string(contract.ReasonRecovery)
		})
		rebooted := time.Now().Truncate(time.Second)
		if _, err := kube.PatchNode(ctx, env.Client, b.node.Name(), kube.NodeChange{Annotations: map[string]*string{keys.ApproveReboot(): kube.Set(contract.True)}}); err != nil {
			t.Fatal(err)
		}
		b.waitEventSince(ctx, string(contract.EventDriverLoaded), "driver "+standinVersion+" loaded from the tree installed in "+kubeosRoot, rebooted)
		b.waitLoaded(ctx, standinVersion, otherVersion)
		if n := len(b.node.BootIDs()); n != boots+1 {
			t.Fatalf("%d boots for one recovery; want exactly one reboot", n-boots)
		}
		if got := b.readVersionInfo(); got != standinVersion {
			t.Fatalf("version.info %q after the recovery reboot; want the installed %s", got, standinVersion)
		}
	})
}

// newTreeBed is an install bed on a read-only-root node with
// values-kubeos.yaml's driver path, installed in run mode with the vendor
// .run (which fails there); its images are tree images.
func newTreeBed(ctx context.Context, t *testing.T) *installBed {
	t.Helper()
	b, kit := startBed(ctx, t, bedSpec{prefix: "kubeos", os: "oe2403sp3", readOnlyRoot: true, root: kubeosRoot,
		image: func(u *standin.UserSpace, kernel string) (v1.ImageIndex, error) {
			return u.DriverTreeImage(kernel, nil)
		}})
	b.vals["driver"].(map[string]any)["profiles"].([]any)[0].(map[string]any)["installMode"] = "run"
	b.vals["devicePlugin"] = map[string]any{"dataTraceHostPath": "/var/lib/mindx/datatrace-config"}
	u, err := kit.UserSpace(standin.Model910B)
	if err != nil {
		t.Fatal(err)
	}
	run, err := u.DriverImage()
	if err != nil {
		t.Fatal(err)
	}
	b.since = time.Now().Add(-time.Minute)
	b.installChart(ctx, run)
	return b
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
