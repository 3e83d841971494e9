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
	if n := len(got.GetDevice(AllDevice).ContainerEdits.DeviceNodes); n != 8+len(CommonDeviceNodes) {
		t.Errorf("all has %d device nodes, want 8 chips and the common ones", n)
	}
	if len(got.ContainerEdits.DeviceNodes)+len(got.ContainerEdits.Mounts) != 0 {
		t.Errorf("spec-wide edits %+v: they would come with the driver device too", got.ContainerEdits)
	}
	nodes, mounts := edits(t, h, got.GetDevice("3").ContainerEdits)
	if want := "/dev/davinci3,/dev/davinci_manager,/dev/devmm_svm,/dev/hisi_hdc"; strings.Join(nodes, ",") != want {
		t.Errorf("device 3 nodes %v, want %s", nodes, want)
	}
	want := "/usr/local/Ascend/driver/lib64->/usr/local/Ascend/driver/lib64,/usr/local/Ascend/driver/version.info->/usr/local/Ascend/driver/version.info,/usr/local/dcmi->/usr/local/dcmi,/usr/local/sbin/npu-smi->/usr/local/bin/npu-smi"
	if strings.Join(mounts, ",") != want {
		t.Errorf("device 3 mounts %v, want %s", mounts, want)
	}
	// The driver's user space alone: what a workload gets without a chip.
	dn, dm := edits(t, h, got.GetDevice(DriverDevice).ContainerEdits)
	if len(dn) != 0 || strings.Join(dm, ",") != want {
		t.Errorf("driver device: nodes %v mounts %v; want no node and %s", dn, dm, want)
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
	want := kubeos + "/lib64->/usr/local/Ascend/driver/lib64," + kubeos + "/version.info->/usr/local/Ascend/driver/version.info," + kubeos + "/tools/npu-smi->/usr/local/bin/npu-smi"
	if strings.Join(mounts, ",") != want {
		t.Errorf("KubeOS driver mounts %v, want %s", mounts, want)
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
