package simhost

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/openfuyao/npu-stack/internal/host"
)

func newHost(t *testing.T, spec Spec) *Host {
	t.Helper()
	h, err := Create(t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestRebootChangesBootIDAndLoadsTheInstalledDriver(t *testing.T) {
	h := newHost(t, Spec{Chip: "910b", ChipCount: 8, Driver: "25.3.0"})
	before, err := h.BootID()
	if err != nil || len(before) != 36 {
		t.Fatalf("boot ID %q, %v: want a UUID", before, err)
	}
	if done, err := h.CompleteReboot(); err != nil || done {
		t.Fatalf("CompleteReboot without a request = %v, %v; want false", done, err)
	}
	if err := h.Reboot(context.Background(), host.RebootMethod("kexec")); err == nil {
		t.Fatal("unknown reboot method accepted")
	}
	if err := h.Reboot(context.Background(), host.RebootSysrq); err != nil {
		t.Fatal(err)
	}
	if st, _ := h.State(); st.RebootRequest != host.RebootSysrq {
		t.Fatalf("request %q not recorded", st.RebootRequest)
	}
	if done, err := h.CompleteReboot(); err != nil || !done {
		t.Fatalf("CompleteReboot = %v, %v", done, err)
	}
	st, err := h.State()
	if err != nil {
		t.Fatal(err)
	}
	if st.BootID == before || st.Reboots != 1 || st.LoadedDriver != st.InstalledDriver || st.RebootRequest != "" {
		t.Fatalf("after reboot: %+v; want new boot ID, 1 reboot, the installed driver loaded, no request", st)
	}
}

func TestRunDirIsTmpfsAcrossReboot(t *testing.T) {
	h := newHost(t, Spec{Chip: "910b", ChipCount: 1})
	marker := h.Path("/run/npu-stack/driver-ready")
	if !strings.HasPrefix(marker, h.Dir) {
		t.Fatalf("host path %s escapes the simulated host %s", marker, h.Dir)
	}
	if err := writeFile(marker); err != nil {
		t.Fatal(err)
	}
	keep := h.Path("/var/lib/npu-stack/budget")
	if err := writeFile(keep); err != nil {
		t.Fatal(err)
	}
	_ = h.Reboot(context.Background(), host.RebootSystemd)
	if _, err := h.CompleteReboot(); err != nil {
		t.Fatal(err)
	}
	if exists(marker) || !exists(keep) {
		t.Fatalf("after reboot /run kept=%v (want false), /var/lib kept=%v (want true)", exists(marker), exists(keep))
	}
}

func TestNPUSMIReflectsChips(t *testing.T) {
	ctx := context.Background()
	h := newHost(t, Spec{Chip: "310p", ChipCount: 4})
	if _, err := h.NPUSMI(ctx, "info"); err == nil {
		t.Fatal("npu-smi succeeded with no driver installed")
	} else if _, ok := host.IsProblem(err); !ok {
		t.Fatalf("no driver installed, so no npu-smi: want a host problem, got %v", err)
	}
	if err := h.InstallDriver(ctx, "25.3.0", []string{"/driver.run"}); err != nil {
		t.Fatal(err)
	}
	// A kernel update: the boot finds no modules for the new kernel.
	_ = h.Update(func(st *State) error { st.InstalledDriver = ""; return nil })
	_ = h.Reboot(ctx, host.RebootSystemd)
	_, _ = h.CompleteReboot()
	if _, err := h.NPUSMI(ctx, "info"); err == nil {
		t.Fatal("npu-smi succeeded with no driver loaded")
	} else if ee, ok := host.IsExitError(err); !ok || ee.Code == 0 {
		t.Fatalf("driver installed, not loaded: want npu-smi's exit error, got %v", err)
	}
	if err := h.LoadDriver("25.3.0"); err != nil {
		t.Fatal(err)
	}
	if err := h.LoadDriver("25.5.0"); err == nil {
		t.Fatal("loaded a second driver version without a reboot")
	}
	out, err := h.NPUSMI(ctx, "info")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(out), "310P3"); got != 4 {
		t.Fatalf("%d chips in output, want 4:\n%s", got, out)
	}
	if !strings.Contains(string(out), "Version: 25.3.0") {
		t.Fatalf("driver version missing:\n%s", out)
	}
	if err := h.Wedge(2); err != nil {
		t.Fatal(err)
	}
	if err := h.Wedge(4); err == nil {
		t.Fatal("wedged a chip that does not exist")
	}
	out, _ = h.NPUSMI(ctx, "info")
	if got := strings.Count(string(out), "Critical"); got != 1 {
		t.Fatalf("%d critical chips, want 1:\n%s", got, out)
	}

	if err := h.SetSMI(SMIHang, "", 0); err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := h.NPUSMI(hctx, "info"); err == nil {
		t.Fatal("hung npu-smi returned without error")
	}
	if err := h.SetSMI(SMIRaw, "garbage\n", 3); err != nil {
		t.Fatal(err)
	}
	out, err = h.NPUSMI(ctx, "info")
	if ee, ok := host.IsExitError(err); !ok || ee.Code != 3 || string(out) != "garbage\n" {
		t.Fatalf("raw mode: %q, %v", out, err)
	}
}

func TestStickyWedgeSurvivesReboot(t *testing.T) {
	h := newHost(t, Spec{Chip: "910b", ChipCount: 2})
	_ = h.Wedge(1)
	_ = h.Reboot(context.Background(), host.RebootSystemd)
	_, _ = h.CompleteReboot()
	if st, _ := h.State(); len(st.Wedged) != 0 {
		t.Fatalf("plain wedge survived a reboot: %v", st.Wedged)
	}
	_ = h.Update(func(st *State) error { st.StickyWedge = true; return nil })
	_ = h.Wedge(1)
	_ = h.Reboot(context.Background(), host.RebootSystemd)
	_, _ = h.CompleteReboot()
	if st, _ := h.State(); len(st.Wedged) != 1 {
		t.Fatalf("sticky wedge lost in a reboot: %v", st.Wedged)
	}
}

func TestDriverCreatesDevicesAndTreeAndBootLoadsWhatIsInstalled(t *testing.T) {
	h := newHost(t, Spec{Chip: "910b", ChipCount: 2})
	if exists(h.Path("/dev/davinci0")) {
		t.Fatal("device node without a driver")
	}
	if err := h.InstallDriver(context.Background(), "25.3.0", []string{"/install.sh"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/dev/davinci0", "/dev/davinci1", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc",
		DriverRoot + "/version.info", DriverRoot + "/lib64/driver/libdcmi.so", DriverRoot + "/lib64/common/libc_sec.so",
		"/usr/local/sbin/npu-smi", "/usr/local/bin/npu-smi", "/usr/local/dcmi/libdcmi.so", "/sys/module/drv_pcie_host",
		"/etc/ascend_install.info", "/etc/ld.so.conf.d/ascend_driver_so.conf"} {
		if !exists(h.Path(p)) {
			t.Errorf("%s missing after driver install", p)
		}
	}
	for _, p := range []string{"/sys/module/drv_davinci_host", DriverRoot + "/tools/npu-smi"} {
		if exists(h.Path(p)) {
			t.Errorf("%s exists: the vendor's installer does not make it", p)
		}
	}
	// The boot loads the installed driver again.
	_ = h.Reboot(context.Background(), host.RebootSystemd)
	_, _ = h.CompleteReboot()
	if !exists(h.Path("/dev/davinci0")) || !exists(h.Path("/sys/module/drv_pcie_host")) {
		t.Fatal("after reboot: want the installed driver loaded by the boot, with its device nodes")
	}
	// A boot that finds no modules (a new kernel) loads nothing.
	_ = h.Update(func(st *State) error { st.InstalledDriver = ""; return nil })
	_ = h.Reboot(context.Background(), host.RebootSystemd)
	_, _ = h.CompleteReboot()
	if exists(h.Path("/dev/davinci0")) || exists(h.Path("/dev/davinci_manager")) || exists(h.Path("/sys/module/drv_pcie_host")) || !exists(h.Path(DriverRoot+"/lib64")) {
		t.Fatal("after a boot without modules: want no device nodes, no modules and the driver tree kept")
	}
}

func TestRebootAcceptsSystemdAndTheSystemctlAlias(t *testing.T) {
	for _, m := range []host.RebootMethod{host.RebootSystemd, "systemctl"} {
		h := newHost(t, Spec{Chip: "910b", ChipCount: 1})
		if err := h.Reboot(context.Background(), m); err != nil {
			t.Fatalf("Reboot(%q): %v", m, err)
		}
		if st, _ := h.State(); st.RebootRequest != host.RebootSystemd {
			t.Fatalf("Reboot(%q) recorded request %q; want %q", m, st.RebootRequest, host.RebootSystemd)
		}
	}
}

// A stuck npu-smi ignores its context, as one in uninterruptible sleep
// ignores SIGKILL, and returns (failing) only when the harness frees it.
func TestStuckSMIIgnoresCancellation(t *testing.T) {
	h := newHost(t, Spec{Chip: "910b", ChipCount: 2, Driver: "25.3.0"})
	if err := h.SetSMI(SMIStuck, "", 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { _, err := h.NPUSMI(ctx, "info"); done <- err }()
	// Let it see its cancelled context at least once (several polls).
	for i := 0; i < 3; i++ {
		st, _ := h.State()
		select {
		case err := <-done:
			t.Fatalf("stuck npu-smi returned on a cancelled context (%s): %v", st.SMIMode, err)
		case <-time.After(stuckPoll):
		}
	}
	if err := h.SetSMI(SMINormal, "", 0); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "stuck") {
			t.Fatalf("freed npu-smi: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stuck npu-smi not freed when the mode changed")
	}
}
