package simhost

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/internal/host"
)

// The simulated machine answers through the production host.Linux: an
// agent configured for a path the machine does not have fails on it as
// on a real node.
func TestAgentAskingInventedPathsFails(t *testing.T) {
	ctx := context.Background()
	h := newHost(t, Spec{Chip: "910b", ChipCount: 2, Driver: "25.5.0"})
	if v, err := OpenAs(h.Dir, host.NewLinux("/")).LoadedDriver(ctx); err != nil || v != "25.5.0" {
		t.Fatalf("agent with the default driver root: LoadedDriver = %q, %v", v, err)
	}
	wrongRoot := host.NewLinux("/")
	wrongRoot.DriverRoot = "/opt/ascend/driver"
	if v, err := OpenAs(h.Dir, wrongRoot).LoadedDriver(ctx); !isProblem(err) {
		t.Errorf("agent with an invented driver root: LoadedDriver = %q, %v; want a host problem", v, err)
	}
	wrongSMI := host.NewLinux("/")
	wrongSMI.NPUSMIPath = "/usr/bin/npu-smi"
	if _, err := OpenAs(h.Dir, wrongSMI).NPUSMI(ctx, "info"); !isProblem(err) {
		t.Errorf("agent with an invented npu-smi path: %v; want a host problem", err)
	}
	if out, err := h.NPUSMI(ctx, "info"); err != nil || strings.Count(string(out), "910B3") != 2 {
		t.Fatalf("npu-smi at its installed path: %q, %v", out, err)
	}
}

// A library gone from the driver tree makes npu-smi fail in the loader,
// a host problem, as on a node.
func TestNPUSMIMissingLibrary(t *testing.T) {
	h := newHost(t, Spec{Chip: "910b", ChipCount: 1, Driver: "25.5.0"})
	if err := os.Remove(h.Path(DriverRoot + "/lib64/common/libmmpa.so")); err != nil {
		t.Fatal(err)
	}
	_, err := h.NPUSMI(context.Background(), "info")
	pe, ok := host.IsProblem(err)
	if !ok || !strings.Contains(pe.What, "libmmpa.so") {
		t.Fatalf("npu-smi without libmmpa.so: %v; want a host problem quoting the loader", err)
	}
}

// KubeOS: /usr is read-only and the image puts the tree under
// /var/lib/Ascend/driver with npu-smi in its tools/.
func TestKubeOSLayout(t *testing.T) {
	ctx := context.Background()
	const kubeos = "/var/lib/Ascend/driver"
	h := newHost(t, Spec{Chip: "910b", ChipCount: 2, DriverRoot: kubeos, ReadOnly: []string{"/usr"}})
	usr := host.NewLinux("/")
	err := OpenAs(h.Dir, usr).InstallDriver(ctx, "25.5.0", []string{"/driver.run"})
	if pe, ok := host.IsProblem(err); !ok || !strings.Contains(pe.Error(), "read-only") || !strings.Contains(pe.Fix, kubeos) {
		t.Fatalf("install into /usr on KubeOS: %v; want a host problem naming the fix", err)
	}
	if st, _ := h.State(); st.Installs != 0 {
		t.Fatalf("the installer ran (%d installs) on a read-only driver path", st.Installs)
	}
	agent := host.NewLinux("/")
	agent.DriverRoot = kubeos
	a := OpenAs(h.Dir, agent)
	if err := a.InstallDriver(ctx, "25.5.0", []string{"/driver.run"}); err != nil {
		t.Fatal(err)
	}
	if v, err := a.LoadedDriver(ctx); err != nil || v != "25.5.0" {
		t.Fatalf("LoadedDriver = %q, %v", v, err)
	}
	if p, err := a.linux.FindNPUSMI(); err != nil || p != kubeos+"/tools/npu-smi" {
		t.Fatalf("npu-smi on KubeOS at %q, %v", p, err)
	}
	if out, err := a.NPUSMI(ctx, "info"); err != nil || !strings.Contains(string(out), "910B3") {
		t.Fatalf("npu-smi on KubeOS: %q, %v", out, err)
	}
}

func isProblem(err error) bool { _, ok := host.IsProblem(err); return ok }
