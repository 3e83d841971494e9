package realnode_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/ociimage"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/realnode"
	"github.com/openfuyao/npu-stack/tests/testbed/standin"
)

// The other driver version the upgrades alternate with standinVersion.
const otherVersion = "25.6.0"

// installBed is one real 910B node running the whole chart, whose stand-in
// device plugin and exporter hold the chips' device nodes as the vendor's
// do, and whose stand-in installer refuses over a loaded driver while any
// process holds one (hicann/driver v8.5.0 driver_install.sh
// check_boot_status). The test plays the rollout's part: it bumps
// driver.version with helm, then labels the node as the rollout does once
// the node is drained, and approves the reboot.
type installBed struct {
	t      *testing.T
	ns     string
	node   *realnode.Node
	vals   map[string]any
	images map[string]v1.ImageIndex // driver image by version
	// generations of the device plugin's and exporter's DaemonSets at the
	// start: the product never edits them.
	generations map[string]int64
	// since is when the current step asked for the reboot.
	since time.Time
	// root is the node's driver tree (the profile's hostDriverPath);
	// empty is host.DefaultDriverRoot.
	root string
}

func (b *installBed) driverRoot() string {
	if b.root == "" {
		return host.DefaultDriverRoot
	}
	return b.root
}

// TestRealNodeDriverInstallFreesTheChips upgrades a real node's driver
// four times, each against the stand-in installer that refuses while the
// davinci nodes are held:
//   - with the device plugin, the exporter and a process of the test's own
//     holding them: the driver pod stops its pods, names the test's
//     process in DriverInstallBlocked, and installs by itself once it
//     exits;
//   - with the driver pod deleted mid-install;
//   - with a helm upgrade changing the driver pod template mid-install;
//   - with a hung installer, stopped at its timeout without a reboot, then
//     retried by the pod.
//
// Each ends with the desired version loaded after exactly one reboot and
// a whole (never half-installed) driver tree, and no DaemonSet of the
// chart edited by the product.
func TestRealNodeDriverInstallFreesTheChips(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	b := newInstallBed(ctx, t)

	if !t.Run("held by our pods and the test's process", func(t *testing.T) {
		b.t = t
		b.helmUpgrade(ctx, otherVersion, nil)
		holder := b.node.Command(ctx, "sh", "-c", "exec cat 3</dev/davinci0")
		stdin, err := holder.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = stdin.Close(); _ = holder.Wait() }()
		boots := len(b.node.BootIDs())
		b.askReboot(ctx, otherVersion)
		b.waitEvent(ctx, string(contract.EventNPUPodsStopped), "while driver "+otherVersion+" is installed")
		b.waitEvent(ctx, string(contract.EventHealthProbesPaused), "to install driver "+otherVersion)
		ev := b.waitEvent(ctx, string(contract.EventDriverInstallBlocked), "(cat) holds /dev/davinci0")
		t.Logf("blocked: %s", ev.Message)
		if n := len(b.node.BootIDs()); n != boots {
			t.Fatalf("node rebooted while the install was blocked (%d boots, had %d)", n, boots)
		}
		if err := stdin.Close(); err != nil { // the holder exits
			t.Fatal(err)
		}
		b.waitUpgraded(ctx, otherVersion, boots)
	}) {
		return
	}

	if !t.Run("driver pod deleted mid-install", func(t *testing.T) {
		b.t = t
		b.helmUpgrade(ctx, standinVersion, nil)
		pause := b.pause(t)
		boots := len(b.node.BootIDs())
		b.askReboot(ctx, standinVersion)
		if _, err := pause.Reached(ctx); err != nil {
			t.Fatal(err)
		}
		b.checkHalfInstalled(true)
		pod := b.driverPod(ctx)
		if err := env.Client.CoreV1().Pods(b.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		b.waitTerminating(ctx, pod.Name)
		if err := pause.Release(); err != nil {
			t.Fatal(err)
		}
		b.waitUpgraded(ctx, standinVersion, boots)
	}) {
		return
	}

	if !t.Run("helm upgrade of the driver pod template mid-install", func(t *testing.T) {
		b.t = t
		b.helmUpgrade(ctx, otherVersion, nil)
		pause := b.pause(t)
		boots := len(b.node.BootIDs())
		b.askReboot(ctx, otherVersion)
		if _, err := pause.Reached(ctx); err != nil {
			t.Fatal(err)
		}
		old := b.driverPod(ctx)
		b.helmUpgrade(ctx, otherVersion, map[string]any{"probeIntervalSeconds": 30}) // the watch container's args
		b.waitTerminating(ctx, old.Name)
		if err := pause.Release(); err != nil {
			t.Fatal(err)
		}
		b.waitUpgraded(ctx, otherVersion, boots)
	}) {
		return
	}

	if !t.Run("hung installer", func(t *testing.T) {
		b.t = t
		b.helmUpgrade(ctx, standinVersion, map[string]any{"probeIntervalSeconds": 30})
		pause := b.pause(t)
		boots, jobs := len(b.node.BootIDs()), b.node.RebootJobs()
		b.askReboot(ctx, standinVersion)
		if _, err := pause.Reached(ctx); err != nil {
			t.Fatal(err)
		}
		ev := b.waitEvent(ctx, string(contract.EventDriverInstallFailed), "did not finish within 1m0s (driver.installTimeoutSeconds) and was stopped")
		t.Logf("hung installer: %s", ev.Message)
		if len(b.node.BootIDs()) != boots || b.node.RebootJobs() != jobs {
			t.Fatalf("node rebooted after its installer hung: %d boots (had %d), %d reboot jobs (had %d)", len(b.node.BootIDs()), boots, b.node.RebootJobs(), jobs)
		}
		n, err := env.Client.CoreV1().Nodes().Get(ctx, b.node.Name(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Annotations[keys.InstalledDriver()]; got != contract.InstalledIncomplete {
			t.Fatalf("installed-driver-version %q after the hung install; want %q", got, contract.InstalledIncomplete)
		}
		b.checkHalfInstalled(true)
		if err := pause.Remove(); err != nil { // the installer no longer hangs: the pod's retry repairs
			t.Fatal(err)
		}
		b.waitUpgraded(ctx, standinVersion, boots)
	}) {
		return
	}

	for name, gen := range b.generations {
		ds, err := env.Client.AppsV1().DaemonSets(b.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ds.Generation != gen {
			t.Errorf("DaemonSet %s: generation %d, was %d: its spec was edited", name, ds.Generation, gen)
		}
	}
}

func newInstallBed(ctx context.Context, t *testing.T) *installBed {
	t.Helper()
	b, _ := startBed(ctx, t, bedSpec{prefix: "install", os: "ubuntu22.04", image: func(u *standin.UserSpace, _ string) (v1.ImageIndex, error) { return u.DriverImage() }})
	b.installChart(ctx, b.images[standinVersion])
	resource := corev1.ResourceName(standin.NewChips(standin.Model910B, bedChips).ResourceName())
	testbed.WaitNode(ctx, t, env.Client, b.node.Name(), fmt.Sprintf("allocatable %s = %d", resource, bedChips), allocatable(resource, bedChips))
	waitStackRunning(ctx, t, b.node)
	dss, err := env.Client.AppsV1().DaemonSets(b.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ds := range dss.Items {
		if strings.Contains(ds.Name, "device-plugin") || strings.Contains(ds.Name, "exporter") {
			b.generations[ds.Name] = ds.Generation
		}
	}
	if len(b.generations) != 2 {
		t.Fatalf("device plugin and exporter DaemonSets: %v", b.generations)
	}
	return b
}

// bedChips is how many 910B chips a bed's node has.
const bedChips = 2

// bedSpec is what differs between beds.
type bedSpec struct {
	prefix, os string
	// readOnlyRoot gives the node KubeOS's mounts; root is then the
	// profile's driver tree.
	readOnlyRoot bool
	root         string
	// image is the driver image of a version's user space for kernel.
	image func(u *standin.UserSpace, kernel string) (v1.ImageIndex, error)
}

// startBed makes a bed's namespace, node (Ready, with the driver user,
// no driver loaded), driver images of standinVersion and otherVersion,
// chart values, and the device plugin and exporter images in the
// registry; the caller installs the chart (installChart).
func startBed(ctx context.Context, t *testing.T, spec bedSpec) (*installBed, *standin.Kit) {
	t.Helper()
	nsObj, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: spec.prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kit, err := standin.BuildKit(ctx, root, filepath.Join(dir, "a"), standinVersion, standin.Model910B)
	if err != nil {
		t.Fatal(err)
	}
	var opts testbed.RealNodeOptions
	if spec.readOnlyRoot {
		opts = testbed.RealNodeOptions{ReadOnlyRoot: true, Insmod: kit.Insmod()}
	}
	node, err := env.AddRealNode(ctx, testbed.NodeSpec{Prefix: spec.prefix, Chip: "910b", ChipCount: bedChips, OS: spec.os, Labels: map[string]string{fleetLabel: ns}}, opts)
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
	b := &installBed{t: t, ns: ns, node: node, images: map[string]v1.ImageIndex{}, generations: map[string]int64{}, root: spec.root}
	for v, us := range map[string]*standin.UserSpace{standinVersion: u, otherVersion: other} {
		if b.images[v], err = spec.image(us, node.KernelRelease()); err != nil {
			t.Fatal(err)
		}
	}
	testbed.WaitNode(ctx, t, env.Client, node.Name(), "Ready", nodeReady)
	prepareHost(ctx, t, node, u, standin.NewChips(standin.Model910B, bedChips))
	driver := map[string]any{"version": standinVersion, "upgradePolicy": map[string]any{"autoUpgrade": false},
		"profiles":              []any{map[string]any{"name": "910b", "chip": "910b", "kernel": node.KernelRelease(), "os": spec.os}},
		"installTimeoutSeconds": 60, "terminationGracePeriodSeconds": 120,
		"installRetry": map[string]any{"initialSeconds": 2, "maxSeconds": 4}}
	if spec.root != "" {
		driver["hostDriverPath"] = spec.root
	}
	b.vals = map[string]any{
		"namespace":       ns,
		"npuNodeSelector": map[string]any{fleetLabel: ns},
		"driver":          driver,
		"rebooter":        map[string]any{"uptimeGuardMinutes": 0},
		"hooks":           map[string]any{"preflight": map[string]any{"enabled": false}, "resume": map[string]any{"enabled": false}},
	}
	images := renderedImages(ctx, t, ns, b.vals)
	for ds, build := range map[string]func() (v1.ImageIndex, error){"device-plugin": kit.DevicePluginImage, "exporter": kit.ExporterImage} {
		img, err := build()
		if err != nil {
			t.Fatal(err)
		}
		b.push(ctx, images[ds], img)
	}
	return b, kit
}

// installChart pushes driver as the profile's image and installs the
// chart with b.vals.
func (b *installBed) installChart(ctx context.Context, driver v1.ImageIndex) {
	t := b.t
	t.Helper()
	b.push(ctx, renderedImages(ctx, t, b.ns, b.vals)["driver-910b"], driver)
	if _, err := env.Helm(b.ns).Install(ctx, b.ns, b.vals, testbed.InstallOptions{DisableHooks: true}); err != nil {
		t.Fatal(err)
	}
	node := b.node.Name()
	t.Cleanup(func() {
		if t.Failed() {
			logPods(t, b.ns)
		}
		_ = env.Helm(b.ns).Uninstall(b.ns)
		_ = env.Client.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), "mindx-dl-deviceinfo-"+node, metav1.DeleteOptions{})
	})
}

func (b *installBed) push(ctx context.Context, ref string, img v1.ImageIndex) {
	b.t.Helper()
	if ref == "" {
		b.t.Fatal("no image reference rendered")
	}
	if err := ociimage.Push(ctx, ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(env.Registry.Keychain())); err != nil {
		b.t.Fatal(err)
	}
}

// helmUpgrade sets driver.version (and healthWatch values) with helm and
// waits until the node's driver pod of that template runs, Ready: a
// version bump replaces the pod without touching the loaded driver.
func (b *installBed) helmUpgrade(ctx context.Context, version string, healthWatch map[string]any) {
	t := b.t
	t.Helper()
	b.vals["driver"].(map[string]any)["version"] = version
	if healthWatch != nil {
		b.vals["healthWatch"] = healthWatch
	}
	b.push(ctx, renderedImages(ctx, t, b.ns, b.vals)["driver-910b"], b.images[version])
	rel, err := env.Helm(b.ns).Upgrade(ctx, b.ns, b.vals, testbed.InstallOptions{DisableHooks: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm upgrade to revision %d: driver.version=%s healthWatch=%v", rel.Version, version, healthWatch)
}

// askReboot labels the drained node as the rollout does when it asks for
// the reboot, and approves it.
func (b *installBed) askReboot(ctx context.Context, target string) {
	b.t.Helper()
	b.since = time.Now().Truncate(time.Second)
	if _, err := kube.PatchNode(ctx, env.Client, b.node.Name(), kube.NodeChange{
		Labels: map[string]*string{keys.UpgradeState(): kube.Set(string(contract.StateRebootRequired)), keys.RebootRequired(): kube.Set(contract.True)},
		Annotations: map[string]*string{keys.RebootReason(): kube.Set(string(contract.ReasonUpgrade)), keys.UpgradeTarget(): kube.Set(target),
			keys.ApproveReboot(): kube.Set(contract.True)},
	}); err != nil {
		b.t.Fatal(err)
	}
}

// waitUpgraded waits until the node rebooted once more than boots and
// runs target, ready, its chips allocatable and its tree whole; then
// clears the rollout's labels, as the rollout does after validation.
func (b *installBed) waitUpgraded(ctx context.Context, target string, boots int) {
	t := b.t
	t.Helper()
	testbed.WaitNode(ctx, t, env.Client, b.node.Name(), "driver "+target+" loaded and ready after the reboot", func(n *corev1.Node) bool {
		_, marked := n.Labels[keys.RebootRequired()]
		q := n.Status.Allocatable[corev1.ResourceName("huawei.com/Ascend910")]
		return !marked && n.Labels[keys.DriverVersion()] == target && n.Labels[keys.DriverReady()] == contract.True &&
			n.Annotations[keys.InstalledDriver()] == target && n.Annotations[keys.InstallStatus()] == "" && q.Value() == 2
	})
	if n := len(b.node.BootIDs()); n != boots+1 {
		t.Fatalf("node %s booted %d times for one upgrade; want exactly one reboot", b.node.Name(), n-boots)
	}
	b.checkHalfInstalled(false)
	info, err := os.ReadFile(b.node.Path(b.driverRoot() + "/version.info"))
	if err != nil || !strings.HasPrefix(string(info), "Version="+target+"\n") {
		t.Fatalf("version.info on %s: %v %q; want %s", b.node.Name(), err, info, target)
	}
	waitStackRunning(ctx, t, b.node)
	if _, err := kube.PatchNode(ctx, env.Client, b.node.Name(), kube.NodeChange{
		Labels: map[string]*string{keys.UpgradeState(): nil}, Annotations: map[string]*string{keys.UpgradeTarget(): nil},
	}); err != nil {
		t.Fatal(err)
	}
}

// pause holds every stand-in installer run on the node half-way until
// released; removed when the subtest ends.
func (b *installBed) pause(t *testing.T) *standin.InstallerPause {
	t.Helper()
	p, err := standin.NewInstallerPause(b.node.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Remove() })
	return p
}

// checkHalfInstalled judges the node's tree as the driver pod does.
func (b *installBed) checkHalfInstalled(want bool) {
	b.t.Helper()
	st, err := host.ReadInstallState(b.node.Path, b.driverRoot())
	if err != nil || st.Half != want {
		b.t.Fatalf("driver tree on %s: %+v, %v; want half-installed=%v", b.node.Name(), st, err, want)
	}
}

// waitEvent waits for an Event of reason on the node whose message holds
// substr. A DriverInstallFailed the test does not wait for ends it at
// once with the installer's words: the install it waits for will not come.
func (b *installBed) waitEvent(ctx context.Context, reason, substr string) *corev1.Event {
	b.t.Helper()
	var found, failed *corev1.Event
	err := testbed.WaitFor(ctx, eventsLW(b.node.Name()), &corev1.Event{}, func(evs []*corev1.Event) (bool, error) {
		for _, e := range evs {
			switch {
			case e.Reason == reason && strings.Contains(e.Message, substr):
				found = e
				return true, nil
			case e.Reason == string(contract.EventDriverInstallFailed) && reason != e.Reason && e.CreationTimestamp.After(b.since):
				failed = e
				return true, nil
			}
		}
		return false, nil
	})
	switch {
	case err != nil:
		b.t.Fatalf("no %s event on node %s containing %q: %v", reason, b.node.Name(), substr, err)
	case failed != nil:
		b.t.Fatalf("waiting for %s on node %s, the install failed: %s", reason, b.node.Name(), failed.Message)
	}
	return found
}

// eventsLW lists and watches the Events of node.
func eventsLW(node string) *cache.ListWatch {
	return cache.NewListWatchFromClient(env.Client.CoreV1().RESTClient(), "events", "",
		fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node}.AsSelector())
}

func (b *installBed) driverPod(ctx context.Context) *corev1.Pod {
	b.t.Helper()
	pods, err := env.Client.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=npu-driver-daemonset",
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", b.node.Name()).String()})
	if err != nil {
		b.t.Fatal(err)
	}
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			return &pods.Items[i]
		}
	}
	b.t.Fatalf("no driver pod on %s", b.node.Name())
	return nil
}

// waitTerminating waits until pod is being deleted and its driver
// container still runs: the kubelet has sent it SIGTERM.
func (b *installBed) waitTerminating(ctx context.Context, name string) {
	b.t.Helper()
	err := testbed.WaitFor(ctx, testbed.PodsLW(env.Client, b.ns, "app=npu-driver-daemonset"), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if p.Name == name && p.DeletionTimestamp != nil {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		b.t.Fatalf("driver pod %s never terminating: %v", name, err)
	}
}
