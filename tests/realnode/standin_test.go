package realnode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/openfuyao/npu-stack/internal/npusmi"
	"github.com/openfuyao/npu-stack/internal/ociimage"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/realnode"
	"github.com/openfuyao/npu-stack/tests/testbed/standin"
)

const standinVersion = "25.5.0"

// TestRealNodeStandInDevicePlugin installs the chart on a 910B and a
// 310P real node whose host roots have no driver yet, with the stand-in
// driver, MindCluster device plugin and exporter images: each profile's
// driver pod runs the stand-in driver package chrooted into its host
// (driver-entry, driver.installCommand's default), with the vendor
// installer's file effects; the device plugin pod the chart renders (its
// wait-for-driver and cdi-generate init containers, command, mounts and
// securityContext as written) registers with each kubelet: allocatable
// huawei.com/Ascend910 on the 910B node and huawei.com/Ascend310P on the
// 310P node are the chip counts, and the 910B node's drops by one when
// npu-smi reports a chip Critical, which the exporter reports too; the
// device plugin's and exporter's processes run under umask 027. It then
// runs the node's npu-smi in a container that lacks the driver's
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
	fleet := []struct {
		chip  string // the profile's chip label
		model standin.Chips
		node  *realnode.Node
		u     *standin.UserSpace
	}{
		{chip: "910b", model: standin.NewChips(standin.Model910B, chips)},
		{chip: "310p", model: standin.NewChips(standin.Model310P, chips)},
	}
	var profiles []any
	for i := range fleet {
		f := &fleet[i]
		node, err := env.AddRealNode(ctx, testbed.NodeSpec{Prefix: "real-" + f.chip, Chip: f.chip, ChipCount: chips, Labels: map[string]string{fleetLabel: ns}})
		if err != nil {
			t.Fatal(err)
		}
		f.node = node
		t.Cleanup(func() { stopNode(t, node) })
		profiles = append(profiles, map[string]any{"name": f.chip, "chip": f.chip, "kernel": node.KernelRelease(), "os": "ubuntu22.04"})
	}

	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kit, err := standin.BuildKit(ctx, root, t.TempDir(), standinVersion, standin.Model910B, standin.Model310P)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fleet {
		if fleet[i].u, err = kit.UserSpace(fleet[i].model.Model); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range fleet {
		testbed.WaitNode(ctx, t, env.Client, f.node.Name(), "Ready", nodeReady)
		prepareHost(ctx, t, f.node, f.u, f.model)
	}
	// The 310P host also has /dev/dvpp_cmdlist, which the device plugin
	// hands out when present (MindCluster v7.3.0 GetDefaultDevices) and
	// host_sys_init.sh sets up when it exists (hicann/driver v8.5.0
	// changeDvppCmdlistMode); the 910B host has none.
	if out, err := fleet[1].node.Command(ctx, "mknod", "-m", "660", "/dev/dvpp_cmdlist", "c", "1", "3").CombinedOutput(); err != nil {
		t.Fatalf("mknod /dev/dvpp_cmdlist on %s: %v, %s", fleet[1].node.Name(), err, out)
	}
	t.Logf("nodes Ready, stand-ins built: %s", time.Since(start).Round(time.Second))

	vals := map[string]any{
		"namespace":       ns,
		"npuNodeSelector": map[string]any{fleetLabel: ns},
		"driver":          map[string]any{"version": standinVersion, "profiles": profiles},
		"rebooter":        map[string]any{"enabled": false},
		"hooks":           map[string]any{"preflight": map[string]any{"enabled": false}, "resume": map[string]any{"enabled": false}},
	}
	images := renderedImages(ctx, t, ns, vals)
	idx := map[string]func() (v1.ImageIndex, error){
		"device-plugin": kit.DevicePluginImage,
		"exporter":      kit.ExporterImage,
	}
	for _, f := range fleet {
		idx["driver-"+f.chip] = f.u.DriverImage
	}
	for ds, build := range idx {
		ref := images[ds]
		if ref == "" {
			t.Fatalf("no DaemonSet %s in the rendered chart (%v)", ds, images)
		}
		img, err := build()
		if err != nil {
			t.Fatal(err)
		}
		if err := ociimage.Push(ctx, ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(env.Registry.Keychain())); err != nil {
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
		for _, f := range fleet {
			_ = env.Client.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), "mindx-dl-deviceinfo-"+f.node.Name(), metav1.DeleteOptions{})
		}
	})

	for _, f := range fleet {
		resource := corev1.ResourceName(f.model.ResourceName())
		testbed.WaitNode(ctx, t, env.Client, f.node.Name(), fmt.Sprintf("allocatable %s = %d", resource, chips), allocatable(resource, chips))
		checkInstalled(ctx, t, f.node, f.u, f.model)
		cmName := "mindx-dl-deviceinfo-" + f.node.Name()
		cm, err := env.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, cmName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the device plugin's ConfigMap: %v", err)
		}
		typ := strings.TrimPrefix(string(resource), "huawei.com/")
		if want := fmt.Sprintf(`"%s":"%s-0,%s-1"`, resource, typ, typ); !strings.Contains(cm.Data["DeviceInfoCfg"], want) {
			t.Errorf("ConfigMap %s DeviceInfoCfg %s: want %s", cmName, cm.Data["DeviceInfoCfg"], want)
		}
	}
	checkCDISpec(ctx, t, fleet[0].node, "/dev/davinci_manager", "/dev/hisi_hdc", "/dev/devmm_svm")
	checkCDISpec(ctx, t, fleet[1].node, "/dev/davinci_manager", "/dev/hisi_hdc", "/dev/devmm_svm", "/dev/dvpp_cmdlist")
	t.Logf("device plugins registered: %s", time.Since(start).Round(time.Second))

	node := fleet[0].node
	sick := standin.NewChips(standin.Model910B, chips)
	sick.Chips[1].Health = "Critical"
	if err := standin.WriteChips(node.Path, sick); err != nil {
		t.Fatal(err)
	}
	resource := corev1.ResourceName(sick.ResourceName())
	testbed.WaitNode(ctx, t, env.Client, node.Name(), fmt.Sprintf("allocatable %s = %d after chip 1 went Critical", resource, chips-1), allocatable(resource, chips-1))

	checkExporter(ctx, t, ns, node, "910B3", map[int]int{0: 1, 1: 0})
	for _, f := range fleet {
		checkVendorProcess(ctx, t, f.node, "device-plugin", "device-plugin")
	}
	checkVendorProcess(ctx, t, node, "exporter", "npu-exporter")
	checkWorkload(ctx, t, ns, node, images["device-plugin"])
	checkLoaderError(ctx, t, ns, node, images["device-plugin"])
	t.Logf("test wall time %s", time.Since(start).Round(time.Second))
}

func allocatable(resource corev1.ResourceName, want int64) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool {
		q, ok := n.Status.Allocatable[resource]
		return ok && q.Value() == want
	}
}

// prepareHost lays out what the node has before the driver besides what
// the test bed's host root gives it (its own empty /sys/module): the
// chips, and the driver's user, which the vendor's installer requires and
// does not create: run before, it fails with the vendor's message.
func prepareHost(ctx context.Context, t *testing.T, node *realnode.Node, u *standin.UserSpace, c standin.Chips) {
	t.Helper()
	if mods, err := node.LoadedModules(); err != nil || len(mods) != 0 {
		t.Fatalf("modules loaded on %s before the driver: %v, %v", node.Name(), mods, err)
	}
	if err := standin.WriteChips(node.Path, c); err != nil {
		t.Fatal(err)
	}
	const staged = "/var/lib/npu-stack/installer/standin/driver.run"
	if err := u.WriteRun(node.Path(staged)); err != nil {
		t.Fatal(err)
	}
	out, err := node.Command(ctx, staged, "--full", "--quiet", "--install-for-all").CombinedOutput()
	const want = "ERR_NO:0x0091;ERR_DES:HwHiAiUser not exists! Please add HwHiAiUser"
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("driver package without the HwHiAiUser user on %s: %v, output %q; want it to fail with %q", node.Name(), err, out, want)
	}
	if err := os.Remove(node.Path(staged)); err != nil {
		t.Fatal(err)
	}
	if err := standin.AddDriverUser(node.Path); err != nil {
		t.Fatal(err)
	}
}

// checkInstalled checks the driver package's file effects on the node
// and runs npu-smi there as the health watch does (chrooted into the
// host, here without LD_LIBRARY_PATH: the installer's loader
// configuration applies).
func checkInstalled(ctx context.Context, t *testing.T, node *realnode.Node, u *standin.UserSpace, c standin.Chips) {
	t.Helper()
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
	for i := range len(c.Chips) + 3 {
		d := fmt.Sprintf("/dev/davinci%d", i)
		if i >= len(c.Chips) {
			d = []string{"/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"}[i-len(c.Chips)]
		}
		fi, err := os.Stat(node.Path(d))
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 || fi.Mode().Perm() != 0o666 {
			t.Errorf("%s on %s: %v (%v), want a character device 0666 (--install-for-all)", d, node.Name(), err, fi)
		}
	}
	// Installed again over a loaded driver while the device plugin and
	// the exporter run: they hold the chips' device nodes, so the
	// installer refuses (hicann/driver v8.5.0 driver_install.sh
	// check_boot_status, exitInstallInfo) and leaves the tree whole.
	const staged = "/var/lib/npu-stack/installer/standin/again.run"
	if err := u.WriteRun(node.Path(staged)); err != nil {
		t.Fatal(err)
	}
	out, err := node.Command(ctx, staged, "--full", "--quiet").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !bytes.Contains(out, []byte("The davinci nodes are occupied by some processes, please stop processes and install or uninstall again")) {
		t.Fatalf("second install on %s, over a loaded driver held by the device plugin and exporter: %v\n%s; want exit 1 and the installer's refusal", node.Name(), err, out)
	}
	if _, err := os.Stat(node.Path("/usr/local/Ascend/driver/version.info")); err != nil {
		t.Fatalf("the refused install touched the tree: %v", err)
	}
	// Forced, without --install-for-all: the keys are rewritten in place
	// and nothing is loaded (the device nodes keep their modes until the
	// next boot); without a hot reset the installer exits 2, "Reboot
	// needed for installation/upgrade to take effect!" (install.sh main()).
	out, err = node.Command(ctx, staged, "--full", "--quiet", "--force").CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !bytes.Contains(out, []byte("Reboot needed for installation/upgrade to take effect!")) {
		t.Fatalf("second install on %s, over a loaded driver, forced: %v\n%s; want exit 2 and the reboot notice", node.Name(), err, out)
	}
	info, err = os.ReadFile(node.Path("/etc/ascend_install.info"))
	if err != nil || bytes.Count(info, []byte("Driver_Install_For_All=")) != 1 || !bytes.Contains(info, []byte("Driver_Install_For_All=no\n")) ||
		bytes.Count(info, []byte("Driver_Install_Status=complete\n")) != 1 {
		t.Errorf("/etc/ascend_install.info after a second install: %v\n%s", err, info)
	}
	if fi, err := os.Stat(node.Path("/dev/davinci0")); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("/dev/davinci0 after a second install over a loaded driver: %v (%v), want it untouched", err, fi)
	}
	smi, err := node.Command(ctx, "/usr/local/sbin/npu-smi", "info").Output()
	if err != nil {
		t.Fatalf("npu-smi info on %s: %v\n%s", node.Name(), err, smi)
	}
	parsed, err := npusmi.Parse(smi)
	if err != nil || len(parsed.Chips) != len(c.Chips) || parsed.Version != standinVersion {
		t.Fatalf("npu-smi info on %s: %v, %d chips, version %q\n%s", node.Name(), err, len(parsed.Chips), parsed.Version, smi)
	}
}

// renderedImages are the images of the DaemonSets the chart renders with
// vals, by DaemonSet name less the release's prefix ("driver-910b",
// "device-plugin", "exporter"): each one's main container's.
func renderedImages(ctx context.Context, t *testing.T, ns string, vals map[string]any) map[string]string {
	t.Helper()
	rel, err := env.Helm(ns).Render(ctx, ns, vals)
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{}
	for _, doc := range strings.Split(rel.Manifest, "\n---") {
		var ds appsv1.DaemonSet
		if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096).Decode(&ds); err != nil || ds.Kind != "DaemonSet" {
			continue
		}
		images[strings.TrimPrefix(ds.Name, ns+"-npu-stack-")] = ds.Spec.Template.Spec.Containers[0].Image
	}
	return images
}

// checkExporter reads the exporter's metrics from the node (its pod IP is
// on the node's pod network) and checks each chip's health gauge.
func checkExporter(ctx context.Context, t *testing.T, ns string, node *realnode.Node, model string, want map[int]int) {
	t.Helper()
	var ip string
	err := testbed.WaitFor(ctx, testbed.PodsLW(env.Client, ns, "npu.openfuyao.com/exporter=true"), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if p.Spec.NodeName == node.Name() && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				ip = p.Status.PodIP
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("exporter pod running on %s: %v", node.Name(), err)
	}
	// The container runs before it listens: curl retries a refused
	// connection.
	out, err := node.Command(ctx, "curl", "-sSf", "--retry", "20", "--retry-connrefused", "--retry-delay", "1", "http://"+ip+":8082/metrics").CombinedOutput()
	if err != nil {
		t.Fatalf("exporter metrics from %s: %v\n%s", node.Name(), err, out)
	}
	for id, v := range want {
		line := fmt.Sprintf(`npu_chip_info_health_status{container_name="",id="%d",model_name="%s",namespace="",pcie_bus_info="",pod_name="",vdie_id=""} %d`, id, model, v)
		if !strings.Contains(string(out), line+"\n") {
			t.Errorf("exporter metrics lack %q:\n%s", line, out)
		}
	}
}

// checkWorkload runs a workload as docs/installation.md ("How workloads
// get the driver libraries") writes it, requesting one
// huawei.com/Ascend910 on node, whose chip 1 is Critical: the device
// plugin gives it /dev/davinci0 only, and npu-smi runs in it with the
// documented mounts and LD_LIBRARY_PATH. image stands for the workload's
// (bash and a C library).
func checkWorkload(ctx context.Context, t *testing.T, ns string, node *realnode.Node, image string) {
	t.Helper()
	doc, err := testbed.DocumentedWorkload()
	if err != nil {
		t.Fatal(err)
	}
	pod := *doc
	pod.Namespace, pod.Name, pod.Labels = ns, "workload", map[string]string{"app": "workload"}
	pod.Spec.NodeName, pod.Spec.RestartPolicy = node.Name(), corev1.RestartPolicyNever
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	c := &pod.Spec.Containers[0]
	c.Image, c.Command = image, []string{"/bin/bash", "-c", `printf '%s\n' /dev/* && npu-smi info`}
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, &pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, logs := waitTerminated(ctx, t, ns, "workload", c.Name)
	if code != 0 {
		t.Fatalf("workload on %s: exit %d, log:\n%s", node.Name(), code, logs)
	}
	devs, table, _ := strings.Cut(logs, "+")
	if !strings.Contains(devs, "/dev/davinci0\n") || strings.Contains(devs, "/dev/davinci1\n") || !strings.Contains(devs, "/dev/davinci_manager\n") {
		t.Errorf("workload's /dev: %q, want davinci0 (the healthy chip) and davinci_manager, not davinci1", devs)
	}
	info, err := npusmi.Parse([]byte("+" + table))
	if err != nil || len(info.Chips) != 1 || info.Version != standinVersion {
		t.Errorf("npu-smi info in the workload: %v, chips %+v, version %q\n%s", err, info.Chips, info.Version, table)
	}
}

// checkCDISpec reads the CDI spec the chart's cdi-generate container (root,
// every capability dropped) wrote on node: chip 0's device carries
// /dev/davinci0 and the control nodes the device plugin hands out on that
// host (want, in its order), and the driver device brings npu-smi from
// where the installer put it.
func checkCDISpec(ctx context.Context, t *testing.T, node *realnode.Node, want ...string) {
	t.Helper()
	const path = "/var/run/cdi/huawei-com-npu.yaml"
	out, err := node.Command(ctx, "cat", path).Output()
	if err != nil {
		t.Fatalf("CDI spec %s on %s: %v", path, node.Name(), err)
	}
	var spec cdispecs.Spec
	if err := sigsyaml.Unmarshal(out, &spec); err != nil {
		t.Fatalf("CDI spec %s on %s: %v", path, node.Name(), err)
	}
	devices := map[string]cdispecs.ContainerEdits{}
	for _, d := range spec.Devices {
		devices[d.Name] = d.ContainerEdits
	}
	var nodes []string
	for _, n := range devices["0"].DeviceNodes {
		nodes = append(nodes, n.Path)
	}
	if w := append([]string{"/dev/davinci0"}, want...); !slices.Equal(nodes, w) {
		t.Errorf("CDI device 0 on %s has device nodes %v, want %v", node.Name(), nodes, w)
	}
	smi := false
	for _, m := range devices["driver"].Mounts {
		smi = smi || (m.HostPath == "/usr/local/sbin/npu-smi" && m.ContainerPath == "/usr/local/bin/npu-smi")
	}
	if !smi {
		t.Errorf("CDI device driver on %s does not mount npu-smi: %+v", node.Name(), devices["driver"].Mounts)
	}
}

// checkVendorProcess reads /proc/<pid>/status on node of the running
// container's process (its PID from crictl inspect): the vendor binary
// itself (the chart's bash exec'd it: status Name is the binary's) under
// upstream's umask 027 (MindCluster v7.3.0 npu-exporter.yaml `umask
// 027;npu-exporter ...`; the images' /etc/profile), not the runtime's 0022.
func checkVendorProcess(ctx context.Context, t *testing.T, node *realnode.Node, container, binary string) {
	t.Helper()
	id, err := node.Crictl(ctx, "ps", "-q", "--name", "^"+container+"$")
	if err != nil || len(strings.Fields(string(id))) != 1 {
		t.Fatalf("container %s on %s: %q, %v", container, node.Name(), id, err)
	}
	out, err := node.Crictl(ctx, "inspect", strings.TrimSpace(string(id)))
	if err != nil {
		t.Fatal(err)
	}
	var inspect struct {
		Info struct {
			Pid int `json:"pid"`
		} `json:"info"`
	}
	if err := json.Unmarshal(out, &inspect); err != nil || inspect.Info.Pid <= 0 {
		t.Fatalf("crictl inspect %s on %s: pid %d, %v", container, node.Name(), inspect.Info.Pid, err)
	}
	status, err := node.Command(ctx, "cat", fmt.Sprintf("/proc/%d/status", inspect.Info.Pid)).Output()
	if err != nil {
		t.Fatalf("status of %s (PID %d) on %s: %v", container, inspect.Info.Pid, node.Name(), err)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	if fields["Name"] != binary || fields["Umask"] != "0027" {
		t.Errorf("container %s on %s runs %q with umask %q, want %s with upstream's 0027", container, node.Name(), fields["Name"], fields["Umask"], binary)
	}
}

// waitTerminated waits until container of pod name has terminated and
// returns its exit code and log.
func waitTerminated(ctx context.Context, t *testing.T, ns, name, container string) (int32, string) {
	t.Helper()
	var code int32 = -1
	err := testbed.WaitFor(ctx, testbed.PodsLW(env.Client, ns, "app="+name), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name == container && cs.State.Terminated != nil {
					code = cs.State.Terminated.ExitCode
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s terminated: %v", ns, name, err)
	}
	logs, err := env.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return code, string(logs)
}

// checkLoaderError runs the node's npu-smi (the host's / at /host) in a
// container of the device plugin's image, which has a C library but not
// the driver's libraries, and no chip (so the NRI injector leaves it
// alone; not privileged, which would show it every chip): the loader
// refuses it, exit 127.
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
				SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)},
				VolumeMounts:    []corev1.VolumeMount{{Name: "host", MountPath: "/host", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/", Type: ptr.To(corev1.HostPathDirectory)}}}},
		},
	}
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, logs := waitTerminated(ctx, t, ns, "npu-smi-no-libs", "npu-smi")
	const want = "error while loading shared libraries: libdcmi.so: cannot open shared object file: No such file or directory"
	if code != 127 || !strings.Contains(logs, want) {
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
		dumpLogs(t, node, "containerd", "kubelet")
	}
	stopClean(t, node)
}

// stopClean stops node and fails the test on anything it left behind
// (process, mount, namespace, network device).
func stopClean(t *testing.T, node *realnode.Node) {
	t.Helper()
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
