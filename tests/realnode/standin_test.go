package realnode_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/npusmi"
	"github.com/openfuyao/npu-stack/internal/ociimage"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/realnode"
	"github.com/openfuyao/npu-stack/tests/testbed/standin"
)

const standinVersion = "25.5.0"

// TestRealNodeStandInDevicePlugin installs the stand-in driver package on
// a real node as the vendor's containerised installer runs it (chrooted
// into the host root), installs the chart with the driver pre-installed
// (driver.enabled=false) and the stand-in MindCluster device plugin image,
// and checks that the device plugin pod the chart renders (its init
// containers, command, mounts and securityContext as written) registers
// with the kubelet: the node's allocatable huawei.com/Ascend910 is the
// chip count, and drops by one when npu-smi reports a chip Critical. It
// then runs the node's npu-smi in a container that lacks the driver's
// libraries, which fails with the loader's error (finding 2 of the host
// contract issue, on a real node).
func TestRealNodeStandInDevicePlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	start := time.Now()
	nsObj, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "standin-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	const fleetLabel = "npu-stack.test/standin-fleet"
	const chips = 2
	node, err := env.AddRealNode(ctx, testbed.NodeSpec{Prefix: "real-npu", ChipCount: chips, Labels: map[string]string{fleetLabel: ns}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopNode(t, node) })

	u, err := standin.BuildUserSpace(ctx, t.TempDir(), standinVersion)
	if err != nil {
		t.Fatal(err)
	}
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	pluginBin := filepath.Join(t.TempDir(), "device-plugin")
	if err := standin.BuildGo(ctx, root, "./tests/testbed/standin/cmd/device-plugin", pluginBin); err != nil {
		t.Fatal(err)
	}
	testbed.WaitNode(ctx, t, env.Client, node.Name(), "Ready", nodeReady)
	t.Logf("node %s Ready, stand-ins built: %s", node.Name(), time.Since(start).Round(time.Second))

	installDriver(ctx, t, node, u, standin.NewChips(standin.Model910B, chips))

	vals := map[string]any{
		"namespace":       ns,
		"npuNodeSelector": map[string]any{fleetLabel: ns},
		"driver":          map[string]any{"enabled": false},
		"exporter":        map[string]any{"enabled": false},
		"rebooter":        map[string]any{"enabled": false},
		"hooks":           map[string]any{"preflight": map[string]any{"enabled": false}, "resume": map[string]any{"enabled": false}},
	}
	pluginImage := renderedDevicePluginImage(ctx, t, ns, vals)
	idx, err := u.DevicePluginImage(pluginBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := ociimage.Push(ctx, pluginImage, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(env.Registry.Keychain())); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Helm(ns).Install(ctx, ns, vals, testbed.InstallOptions{DisableHooks: true}); err != nil {
		t.Fatal(err)
	}
	cmName := "mindx-dl-deviceinfo-" + node.Name()
	t.Cleanup(func() {
		if t.Failed() {
			logPods(t, ns)
		}
		_ = env.Helm(ns).Uninstall(ns)
		_ = env.Client.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), cmName, metav1.DeleteOptions{})
	})

	resource := corev1.ResourceName(standin.NewChips(standin.Model910B, 0).ResourceName())
	allocatable := func(want int64) func(*corev1.Node) bool {
		return func(n *corev1.Node) bool {
			q, ok := n.Status.Allocatable[resource]
			return ok && q.Value() == want
		}
	}
	testbed.WaitNode(ctx, t, env.Client, node.Name(), fmt.Sprintf("allocatable %s = %d", resource, chips), allocatable(chips))
	t.Logf("device plugin registered %d chips: %s", chips, time.Since(start).Round(time.Second))
	cm, err := env.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, cmName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the device plugin's ConfigMap: %v", err)
	}
	if !strings.Contains(cm.Data["DeviceInfoCfg"], `"huawei.com/Ascend910":"Ascend910-0,Ascend910-1"`) {
		t.Errorf("ConfigMap %s DeviceInfoCfg %s: want both chips healthy", cmName, cm.Data["DeviceInfoCfg"])
	}

	sick := standin.NewChips(standin.Model910B, chips)
	sick.Chips[1].Health = "Critical"
	if err := standin.WriteChips(node.Path, sick); err != nil {
		t.Fatal(err)
	}
	testbed.WaitNode(ctx, t, env.Client, node.Name(), fmt.Sprintf("allocatable %s = %d after chip 1 went Critical", resource, chips-1), allocatable(chips-1))

	checkLoaderError(ctx, t, ns, node, pluginImage)
	t.Logf("test wall time %s", time.Since(start).Round(time.Second))
}

// installDriver lays out the node's host root as the stand-in driver
// package installs it: the test bed's /sys/module and chips (interface 8:
// a tmpfs over /sys/module in the node's mount namespace), the driver's
// user (which the vendor's installer requires), and the package run
// chrooted into the node's root with the chart's default options, as
// driver-entry runs it. It checks the package's file effects.
func installDriver(ctx context.Context, t *testing.T, node *realnode.Node, u *standin.UserSpace, c standin.Chips) {
	t.Helper()
	if out, err := node.Command(ctx, "mount", "-t", "tmpfs", "-o", "mode=755", "sysfs-modules", "/sys/module").CombinedOutput(); err != nil {
		t.Fatalf("tmpfs over /sys/module on %s: %v\n%s", node.Name(), err, out)
	}
	if err := standin.AddDriverUser(node.Path); err != nil {
		t.Fatal(err)
	}
	if err := standin.WriteChips(node.Path, c); err != nil {
		t.Fatal(err)
	}
	const staged = "/var/lib/npu-stack/installer/standin/driver.run"
	if err := u.WriteRun(node.Path(staged), c.Model); err != nil {
		t.Fatal(err)
	}
	out, err := node.Command(ctx, staged, "--full", "--quiet", "--install-for-all", "--install-path=/usr/local/Ascend").CombinedOutput()
	if err != nil {
		t.Fatalf("stand-in driver package on %s: %v\n%s", node.Name(), err, out)
	}
	kernel, err := node.Command(ctx, "uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/usr/local/Ascend/driver/version.info", "/usr/local/Ascend/driver/lib64/driver/libdcmi.so",
		"/usr/local/Ascend/driver/lib64/common/libc_sec.so", "/usr/local/bin/npu-smi", "/usr/local/sbin/npu-smi",
		"/usr/local/dcmi/libdcmi.so", "/etc/ld.so.conf.d/ascend_driver_so.conf", "/lib/davinci.conf",
		"/lib/modules/" + strings.TrimSpace(string(kernel)) + "/updates/drv_pcie_host.ko", "/sys/module/drv_pcie_host"} {
		if _, err := os.Stat(node.Path(p)); err != nil {
			t.Errorf("after the install: %v", err)
		}
	}
	info, err := os.ReadFile(node.Path("/etc/ascend_install.info"))
	if err != nil || !bytes.Contains(info, []byte("Driver_Install_For_All=yes\n")) || !bytes.HasSuffix(info, []byte("Driver_Install_Status=complete\n")) {
		t.Errorf("/etc/ascend_install.info: %v\n%s", err, info)
	}
	for _, d := range []string{"/dev/davinci0", "/dev/davinci1", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"} {
		fi, err := os.Stat(node.Path(d))
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 || fi.Mode().Perm() != 0o666 {
			t.Errorf("%s on %s: %v (mode %v), want a character device 0666", d, node.Name(), err, fi.Mode())
		}
	}
	// On the host, as the health watch runs it (chrooted, here without
	// LD_LIBRARY_PATH: the installer's loader configuration applies).
	smi, err := node.Command(ctx, "/usr/local/sbin/npu-smi", "info").Output()
	if err != nil {
		t.Fatalf("npu-smi info on %s: %v\n%s", node.Name(), err, smi)
	}
	parsed, err := npusmi.Parse(smi)
	if err != nil || len(parsed.Chips) != len(c.Chips) || parsed.Version != standinVersion {
		t.Fatalf("npu-smi info on %s: %v, %d chips, version %q\n%s", node.Name(), err, len(parsed.Chips), parsed.Version, smi)
	}
}

// renderedDevicePluginImage is the image of the device-plugin container
// the chart renders with vals.
func renderedDevicePluginImage(ctx context.Context, t *testing.T, ns string, vals map[string]any) string {
	t.Helper()
	rel, err := env.Helm(ns).Render(ctx, ns, vals)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(rel.Manifest, "\n---") {
		var ds appsv1.DaemonSet
		if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096).Decode(&ds); err != nil || ds.Kind != "DaemonSet" {
			continue
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Name == "device-plugin" {
				return c.Image
			}
		}
	}
	t.Fatal("no device-plugin container in the rendered chart")
	return ""
}

// checkLoaderError runs the node's npu-smi (the host's / at /host) in a
// container of the device plugin's image, which has a C library but not
// the driver's libraries: the loader refuses it, exit 127.
func checkLoaderError(ctx context.Context, t *testing.T, ns string, node *realnode.Node, image string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "npu-smi-no-libs", Labels: map[string]string{"app": "npu-smi-no-libs"}},
		Spec: corev1.PodSpec{
			NodeName:                      node.Name(),
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name:            "npu-smi",
				Image:           image,
				Command:         []string{"/host/usr/local/bin/npu-smi", "info"},
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true), RunAsUser: ptr.To[int64](0)},
				VolumeMounts:    []corev1.VolumeMount{{Name: "host", MountPath: "/host", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/", Type: ptr.To(corev1.HostPathDirectory)}}}},
		},
	}
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var code int32 = -1
	err := testbed.WaitFor(ctx, testbed.PodsLW(env.Client, ns, "app=npu-smi-no-libs"), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Terminated != nil {
					code = cs.State.Terminated.ExitCode
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("npu-smi pod on %s: %v", node.Name(), err)
	}
	logs, err := env.Client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "npu-smi"}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const want = "error while loading shared libraries: libdcmi.so: cannot open shared object file: No such file or directory"
	if code != 127 || !strings.Contains(string(logs), want) {
		t.Errorf("npu-smi in a container without the driver's libraries: exit %d, log %q; want exit 127 and %q", code, logs, want)
	}
}

func logPods(t *testing.T, ns string) {
	pods, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Log(err)
		return
	}
	for _, p := range pods.Items {
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			b, _ := env.Client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(context.Background())
			t.Logf("pod %s container %s (phase %s):\n%s", p.Name, c.Name, p.Status.Phase, b)
		}
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			t.Logf("pod %s container %s state %+v", p.Name, cs.Name, cs.State)
		}
	}
}

// stopNode stops node (logging its daemons' logs if the test failed) and
// reports what it left behind.
func stopNode(t *testing.T, node *realnode.Node) {
	if t.Failed() {
		for _, d := range []string{"containerd", "kubelet"} {
			b, _ := os.ReadFile(node.LogPath(d))
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("%s log of %s (end):\n%s", d, node.Name(), b)
		}
	}
	if err := node.Stop(); err != nil {
		t.Errorf("stop node %s: %v", node.Name(), err)
	}
	left, err := node.Leftovers()
	if err != nil {
		t.Error(err)
	}
	if len(left) > 0 {
		t.Errorf("node %s left behind:\n%s", node.Name(), strings.Join(left, "\n"))
	}
}
