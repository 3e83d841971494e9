package realnode_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/ociimage"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/realnode"
	"github.com/openfuyao/npu-stack/tests/testbed/standin"
)

// stackContainers are the containers the chart runs on an NPU node: the
// driver pod's driver and health watch, the rebooter, the device plugin
// and the exporter.
var stackContainers = []string{"device-plugin", "driver", "exporter", "rebooter", "watch"}

// TestRealNodeChartRebootsWithDriver installs the whole chart on a real
// 910B node (the stand-in driver, device plugin and exporter images), so
// that containerd and runc start the driver, health-watch, rebooter,
// device-plugin and exporter containers as rendered, then has the
// rebooter reboot the node over its bus: the node comes back with the
// driver the installer left loaded at boot, every container of the stack
// running again, the driver pod reporting the loaded version ready and
// the device plugin's chips allocatable again.
func TestRealNodeChartRebootsWithDriver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	nsObj, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fullstack-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	const chips = 2
	model := standin.NewChips(standin.Model910B, chips)
	node, err := env.AddRealNode(ctx, testbed.NodeSpec{Prefix: "fullstack", Chip: "910b", ChipCount: chips, Labels: map[string]string{fleetLabel: ns}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopNode(t, node) })
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kit, err := standin.BuildKit(ctx, root, t.TempDir(), standinVersion, standin.Model910B)
	if err != nil {
		t.Fatal(err)
	}
	u, err := kit.UserSpace(standin.Model910B)
	if err != nil {
		t.Fatal(err)
	}
	first := node.BootIDs()[0]
	testbed.WaitNode(ctx, t, env.Client, node.Name(), "Ready", nodeReady)
	prepareHost(ctx, t, node, u, model)

	vals := map[string]any{
		"namespace":       ns,
		"npuNodeSelector": map[string]any{fleetLabel: ns},
		"driver": map[string]any{"version": standinVersion, "upgradePolicy": map[string]any{"autoUpgrade": false},
			"profiles": []any{map[string]any{"name": "910b", "chip": "910b", "kernel": node.KernelRelease(), "os": "ubuntu22.04"}}},
		"rebooter": map[string]any{"uptimeGuardMinutes": 0},
		"hooks":    map[string]any{"preflight": map[string]any{"enabled": false}, "resume": map[string]any{"enabled": false}},
	}
	images := renderedImages(ctx, t, ns, vals)
	for ds, build := range map[string]func() (v1.ImageIndex, error){
		"device-plugin": kit.DevicePluginImage,
		"exporter":      kit.ExporterImage,
		"driver-910b":   u.DriverImage,
	} {
		img, err := build()
		if err != nil {
			t.Fatal(err)
		}
		if images[ds] == "" {
			t.Fatalf("no DaemonSet %s in the rendered chart (%v)", ds, images)
		}
		if err := ociimage.Push(ctx, images[ds], img, remote.WithContext(ctx), remote.WithAuthFromKeychain(env.Registry.Keychain())); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Helm(ns).Install(ctx, ns, vals, testbed.InstallOptions{DisableHooks: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logPods(t, ns)
		}
		_ = env.Helm(ns).Uninstall(ns)
		_ = env.Client.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), "mindx-dl-deviceinfo-"+node.Name(), metav1.DeleteOptions{})
	})
	resource := corev1.ResourceName(model.ResourceName())
	testbed.WaitNode(ctx, t, env.Client, node.Name(), fmt.Sprintf("allocatable %s = %d", resource, chips), allocatable(resource, chips))
	waitStackRunning(ctx, t, node)
	t.Logf("stack running on %s: %s", node.Name(), time.Since(start).Round(time.Second))

	change := kube.NodeChange{
		Labels:      map[string]*string{keys.RebootRequired(): kube.Set(contract.True)},
		Annotations: map[string]*string{keys.RebootReason(): kube.Set(string(contract.ReasonUpgrade)), keys.ApproveReboot(): kube.Set(contract.True)},
	}
	if _, err := kube.PatchNode(ctx, env.Client, node.Name(), change); err != nil {
		t.Fatal(err)
	}
	testbed.WaitNode(ctx, t, env.Client, node.Name(), "rebooted, marker cleared by the rebooter", func(n *corev1.Node) bool {
		_, marked := n.Labels[keys.RebootRequired()]
		return !marked && n.Annotations[keys.RebootedFromBootID()] == first && n.Status.NodeInfo.BootID != first
	})
	if ids := node.BootIDs(); len(ids) != 2 || node.RebootJobs() != 1 {
		t.Fatalf("node %s: boot IDs %v after %d reboot.target jobs; want 2 after 1", node.Name(), ids, node.RebootJobs())
	}
	mods, err := node.LoadedModules()
	if err != nil || !slices.Contains(mods, "drv_pcie_host") {
		t.Errorf("modules after the reboot: %v, %v; want the installed driver's, drv_pcie_host among them", mods, err)
	}
	testbed.WaitNode(ctx, t, env.Client, node.Name(), fmt.Sprintf("allocatable %s = %d, driver %s ready after the reboot", resource, chips, standinVersion), func(n *corev1.Node) bool {
		return nodeReady(n) && allocatable(resource, chips)(n) &&
			n.Labels[keys.DriverVersion()] == standinVersion && n.Labels[keys.DriverReady()] == contract.True
	})
	waitStackRunning(ctx, t, node)
	t.Logf("test wall time %s", time.Since(start).Round(time.Second))
}

// waitStackRunning waits until crictl on the node lists every container
// of the stack running (started by containerd and runc). The kubelet's
// pod status would say the same; crictl asks the runtime itself. Polled:
// the runtime has nothing to watch from here.
func waitStackRunning(ctx context.Context, t *testing.T, node *realnode.Node) {
	t.Helper()
	var running []string
	var last error
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		names, err := node.RunningContainers(ctx)
		if last = err; err != nil {
			return false, nil //nolint:nilerr // the runtime may be restarting: ask again
		}
		running = running[:0]
		for _, name := range names {
			if slices.Contains(stackContainers, name) {
				running = append(running, name)
			}
		}
		return slices.Equal(running, stackContainers), nil
	})
	if err != nil {
		t.Fatalf("containers running on %s: %v, want %v: %v (last crictl error: %v)", node.Name(), running, stackContainers, err, last)
	}
}
