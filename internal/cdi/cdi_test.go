package cdi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

func loadedHost(t *testing.T, chips int) *simhost.Host {
	t.Helper()
	h, err := simhost.Create(t.TempDir(), simhost.Spec{Chip: "910b", ChipCount: chips, Driver: "25.3.0"})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestGenerateValidatedByTheCDILibrary(t *testing.T) {
	h := loadedHost(t, 8)
	spec, err := Build(h, Options{DriverRoot: simhost.DriverRoot})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "huawei-com-npu.yaml")
	if err := os.WriteFile(out, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(out, spec); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(out)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("spec file: %v, %v; want mode 0644", st, err)
	}
	got, err := cdiapi.ReadSpec(out, 0)
	if err != nil {
		t.Fatalf("CDI library rejects the spec: %v", err)
	}
	if got.GetVendor() != "huawei.com" || got.GetClass() != "npu" {
		t.Fatalf("kind %s/%s", got.GetVendor(), got.GetClass())
	}
	for _, name := range []string{"0", "7", AllDevice} {
		if got.GetDevice(name) == nil {
			t.Errorf("device %s missing", name)
		}
	}
	if d := got.GetDevice("3"); d.ContainerEdits.DeviceNodes[0].Path != "/dev/davinci3" {
		t.Errorf("device 3 = %+v", d.ContainerEdits.DeviceNodes)
	}
	if n := len(got.GetDevice(AllDevice).ContainerEdits.DeviceNodes); n != 8+3 {
		t.Errorf("all has %d device nodes, want 8 chips and the host's davinci_manager, hisi_hdc, devmm_svm", n)
	}
	if len(got.ContainerEdits.DeviceNodes)+len(got.ContainerEdits.Mounts) != 0 {
		t.Errorf("spec-wide edits %+v: they would come with the driver device too", got.ContainerEdits)
	}
	nodes, mounts := edits(t, h, got.GetDevice("3").ContainerEdits)
	if want := "/dev/davinci3,/dev/davinci_manager,/dev/hisi_hdc,/dev/devmm_svm"; strings.Join(nodes, ",") != want {
		t.Errorf("device 3 nodes %v, want %s", nodes, want)
	}
	want := "/usr/local/Ascend/driver/lib64->/usr/local/Ascend/driver/lib64,/usr/local/Ascend/driver/version.info->/usr/local/Ascend/driver/version.info,/etc/ascend_install.info->/etc/ascend_install.info,/usr/local/dcmi->/usr/local/dcmi,/usr/local/sbin/npu-smi->/usr/local/bin/npu-smi"
	if strings.Join(mounts, ",") != want {
		t.Errorf("device 3 mounts %v, want %s", mounts, want)
	}
	// The driver's user space alone: what a workload gets without a chip.
	dn, dm := edits(t, h, got.GetDevice(DriverDevice).ContainerEdits)
	if len(dn) != 0 || strings.Join(dm, ",") != want {
		t.Errorf("driver device: nodes %v mounts %v; want no node and %s", dn, dm, want)
	}
}

// TestDeviceNodesPerModel: a chip's device (and "all") carries the
// device nodes MindCluster v7.3.0's device plugin hands a container on
// that host (GetDefaultDevices under the chart's flags: davinci_manager,
// then hisi_hdc, devmm_svm and dvpp_cmdlist when present) and nothing
// else the host has: nodes only -fdFlag, the Atlas 200I SoC A1 or the
// 310B hand out, and the driver's lqdcmi_pcidev, stay out. The "driver"
// device has none.
func TestDeviceNodesPerModel(t *testing.T) {
	// Host nodes outside the plugin's list under the chart's flags
	// (constants.go: HiAi200RC*, Atlas200ISoc*, Atlas310B*;
	// host_sys_init.sh: lqdcmi_pcidev).
	others := []string{"/dev/svm0", "/dev/ts_aisle", "/dev/upgrade", "/dev/log_drv", "/dev/event_sched", "/dev/sys", "/dev/vdec", "/dev/vpc", "/dev/pngd", "/dev/venc", "/dev/lqdcmi_pcidev", "/dev/davinci_manager_docker"}
	for _, tc := range []struct {
		name    string
		chip    string
		chips   int
		add     []string // host nodes beyond simhost's davinci_manager, devmm_svm, hisi_hdc
		remove  []string
		want    string // chip 0's nodes
		wantAll int    // nodes of "all"
	}{
		{name: "910B", chip: "910b", chips: 8, add: others,
			want: "/dev/davinci0,/dev/davinci_manager,/dev/hisi_hdc,/dev/devmm_svm", wantAll: 8 + 3},
		{name: "910B with dvpp_cmdlist", chip: "910b", chips: 8, add: append([]string{"/dev/dvpp_cmdlist"}, others...),
			want: "/dev/davinci0,/dev/davinci_manager,/dev/hisi_hdc,/dev/devmm_svm,/dev/dvpp_cmdlist", wantAll: 8 + 4},
		{name: "A3 (910_93)", chip: "a3", chips: 16, add: append([]string{"/dev/dvpp_cmdlist"}, others...),
			want: "/dev/davinci0,/dev/davinci_manager,/dev/hisi_hdc,/dev/devmm_svm,/dev/dvpp_cmdlist", wantAll: 16 + 4},
		{name: "310P", chip: "310p", chips: 4, add: append([]string{"/dev/dvpp_cmdlist"}, others...),
			want: "/dev/davinci0,/dev/davinci_manager,/dev/hisi_hdc,/dev/devmm_svm,/dev/dvpp_cmdlist", wantAll: 4 + 4},
		{name: "310P without hisi_hdc and devmm_svm", chip: "310p", chips: 1, remove: []string{"/dev/hisi_hdc", "/dev/devmm_svm"},
			want: "/dev/davinci0,/dev/davinci_manager", wantAll: 1 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := simhost.Create(t.TempDir(), simhost.Spec{Chip: tc.chip, ChipCount: tc.chips, Driver: "25.5.0"})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.add {
				if err := os.WriteFile(h.Path(p), nil, 0o666); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range tc.remove {
				if err := os.Remove(h.Path(p)); err != nil {
					t.Fatal(err)
				}
			}
			spec, err := Build(h, Options{DriverRoot: simhost.DriverRoot})
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "spec.yaml")
			if err := Write(out, spec); err != nil {
				t.Fatal(err)
			}
			got, err := cdiapi.ReadSpec(out, 0)
			if err != nil {
				t.Fatal(err)
			}
			if nodes, _ := edits(t, h, got.GetDevice("0").ContainerEdits); strings.Join(nodes, ",") != tc.want {
				t.Errorf("device 0 nodes %v, want %s", nodes, tc.want)
			}
			if n := len(got.GetDevice(AllDevice).ContainerEdits.DeviceNodes); n != tc.wantAll {
				t.Errorf("all has %d device nodes, want %d", n, tc.wantAll)
			}
			if n := len(got.GetDevice(DriverDevice).ContainerEdits.DeviceNodes); n != 0 {
				t.Errorf("driver has %d device nodes, want none", n)
			}
		})
	}
}

func edits(t *testing.T, h *simhost.Host, e specs.ContainerEdits) (nodes, mounts []string) {
	t.Helper()
	for _, n := range e.DeviceNodes {
		nodes = append(nodes, n.Path)
	}
	for _, m := range e.Mounts {
		mounts = append(mounts, m.HostPath+"->"+m.ContainerPath)
		if strings.HasPrefix(m.HostPath, h.Dir) {
			t.Errorf("mount %s leaks the simulated host's directory", m.HostPath)
		}
	}
	return nodes, mounts
}

// KubeOS: the tree under /var/lib/Ascend/driver is mounted where workload
// images expect it, npu-smi from the tree's tools.
func TestGenerateKubeOS(t *testing.T) {
	const kubeos = "/var/lib/Ascend/driver"
	h, err := simhost.Create(t.TempDir(), simhost.Spec{Chip: "910b", ChipCount: 1, Driver: "25.5.0", DriverRoot: kubeos, ReadOnly: []string{"/usr"}})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := Build(h, Options{DriverRoot: kubeos})
	if err != nil {
		t.Fatal(err)
	}
	var mounts []string
	for _, d := range spec.Devices {
		if d.Name == DriverDevice {
			for _, m := range d.ContainerEdits.Mounts {
				mounts = append(mounts, m.HostPath+"->"+m.ContainerPath)
			}
		}
	}
	want := kubeos + "/lib64->/usr/local/Ascend/driver/lib64," + kubeos + "/version.info->/usr/local/Ascend/driver/version.info,/etc/ascend_install.info->/etc/ascend_install.info," + kubeos + "/tools/npu-smi->/usr/local/bin/npu-smi"
	if strings.Join(mounts, ",") != want {
		t.Errorf("KubeOS driver mounts %v, want %s", mounts, want)
	}
	// No /usr/local/dcmi on KubeOS: the loader path does not name it.
	for _, d := range spec.Devices {
		if got := strings.Join(d.ContainerEdits.Env, " "); got != "LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/driver:/usr/local/Ascend/driver/lib64/common" {
			t.Errorf("device %s env %q", d.Name, got)
		}
	}
}

// TestDriverUserSpace: what every chip device and "driver" bring besides
// device nodes, as the host has it: the optional files only when present,
// the loader path naming /usr/local/dcmi only when it is mounted, and the
// loaded version when the caller knows it.
func TestDriverUserSpace(t *testing.T) {
	const lib = "LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/driver:/usr/local/Ascend/driver/lib64/common"
	for _, tc := range []struct {
		name       string
		add        []string // host files beyond simhost's
		remove     []string
		version    string
		wantMounts []string // container paths beyond lib64 and version.info
		wantEnv    string
	}{
		{name: "plain", wantMounts: []string{"/etc/ascend_install.info", "/usr/local/dcmi", "/usr/local/bin/npu-smi"}, wantEnv: lib + ":/usr/local/dcmi"},
		{name: "HCCL node", add: []string{simhost.DriverRoot + "/tools/hccn_tool", "/etc/hccn.conf"}, version: "25.5.0",
			wantMounts: []string{"/etc/ascend_install.info", "/usr/local/dcmi", "/usr/local/bin/npu-smi", "/usr/local/Ascend/driver/tools/hccn_tool", "/etc/hccn.conf"}, wantEnv: lib + ":/usr/local/dcmi"},
		{name: "no install info, no dcmi", remove: []string{"/etc/ascend_install.info", "/usr/local/dcmi"},
			wantMounts: []string{"/usr/local/bin/npu-smi"}, wantEnv: lib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := loadedHost(t, 2)
			for _, p := range tc.add {
				if err := os.MkdirAll(filepath.Dir(h.Path(p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(h.Path(p), nil, 0o640); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range tc.remove {
				if err := os.RemoveAll(h.Path(p)); err != nil {
					t.Fatal(err)
				}
			}
			spec, err := Build(h, Options{DriverRoot: simhost.DriverRoot, DriverVersion: tc.version})
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "spec.yaml")
			if err := Write(out, spec); err != nil {
				t.Fatal(err)
			}
			got, err := cdiapi.ReadSpec(out, 0)
			if err != nil {
				t.Fatal(err)
			}
			if v := SpecVersion(got.Spec); v != tc.version {
				t.Errorf("spec version %q, want %q", v, tc.version)
			}
			want := append([]string{"/usr/local/Ascend/driver/lib64", "/usr/local/Ascend/driver/version.info"}, tc.wantMounts...)
			for _, name := range []string{"0", "1", AllDevice, DriverDevice} {
				e := got.GetDevice(name).ContainerEdits
				var ctr []string
				for _, m := range e.Mounts {
					ctr = append(ctr, m.ContainerPath)
					if strings.Join(m.Options, ",") != "ro,nosuid,nodev,bind" {
						t.Errorf("device %s mount %s options %v, want read-only bind", name, m.ContainerPath, m.Options)
					}
				}
				if strings.Join(ctr, ",") != strings.Join(want, ",") {
					t.Errorf("device %s mounts %v, want %v", name, ctr, want)
				}
				if env := strings.Join(e.Env, " "); env != tc.wantEnv {
					t.Errorf("device %s env %q, want %q", name, env, tc.wantEnv)
				}
			}
		})
	}
}

func TestGenerateCustomKind(t *testing.T) {
	spec, err := Build(loadedHost(t, 2), Options{Kind: "example.com/ascend", DriverRoot: simhost.DriverRoot})
	if err != nil || spec.Kind != "example.com/ascend" {
		t.Fatalf("%v %v", spec, err)
	}
	out := filepath.Join(t.TempDir(), "x.yaml")
	if err := Write(out, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := cdiapi.ReadSpec(out, 0); err != nil {
		t.Fatal(err)
	}
}

func TestGenerateRefusesClearly(t *testing.T) {
	noDriver, err := simhost.Create(t.TempDir(), simhost.Spec{Chip: "910b", ChipCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	_ = os.MkdirAll(noDriver.Path("/dev"), 0o755)
	for _, tc := range []struct {
		name string
		h    *simhost.Host
		o    Options
		want string
	}{
		{"bad kind", loadedHost(t, 1), Options{Kind: "npu", DriverRoot: simhost.DriverRoot}, "set cdi.kind"},
		{"no driver", noDriver, Options{DriverRoot: simhost.DriverRoot}, "no /dev/davinciN"},
		{"no device manager", withoutManager(t), Options{DriverRoot: simhost.DriverRoot}, "/dev/davinci_manager not found: the NPU driver is not loaded"},
		{"wrong driver root", loadedHost(t, 1), Options{DriverRoot: "/var/lib/Ascend/driver"}, "/var/lib/Ascend/driver/lib64 not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Build(tc.h, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	// An invalid spec never replaces a good file.
	out := filepath.Join(t.TempDir(), "spec.yaml")
	_ = os.WriteFile(out, []byte("good"), 0o644)
	spec, _ := Build(loadedHost(t, 1), Options{DriverRoot: simhost.DriverRoot})
	spec.Devices = append(spec.Devices, spec.Devices[0])
	if err := Write(out, spec); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Fatalf("duplicate device accepted: %v", err)
	}
	if b, _ := os.ReadFile(out); string(b) != "good" {
		t.Fatalf("invalid spec replaced the file: %q", b)
	}
}

// withoutManager is a host with chips but no /dev/davinci_manager, which
// the device plugin requires (getDavinciManagerPath).
func withoutManager(t *testing.T) *simhost.Host {
	t.Helper()
	h := loadedHost(t, 1)
	if err := os.Remove(h.Path("/dev/davinci_manager")); err != nil {
		t.Fatal(err)
	}
	return h
}
