package standin

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/internal/npusmi"
)

// buildUserSpace builds the 910B package's user space.
func buildUserSpace(t *testing.T) *UserSpace {
	t.Helper()
	u, err := BuildUserSpace(context.Background(), t.TempDir(), "25.5.0", Model910B)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// fakeRoot is a machine root for NPU_STACK_TESTBED_ROOT: the chips, the
// driver's control device and its version.info where a loaded driver
// has them.
func fakeRoot(t *testing.T, u *UserSpace, c Chips, loaded bool) string {
	t.Helper()
	root := t.TempDir()
	at := func(p string) string { return filepath.Join(root, p) }
	if err := WriteChips(at, c); err != nil {
		t.Fatal(err)
	}
	if loaded {
		if err := os.WriteFile(at("/dev/davinci_manager"), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(at("/usr/local/Ascend/driver"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(u.Dir, "driver", "version.info"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(at("/usr/local/Ascend/driver/version.info"), b, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(at("/etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(at("/etc/ascend_install.info"), []byte("Driver_Install_Path_Param=/usr/local/Ascend\nDriver_Install_Status=complete\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// runSMI runs the built npu-smi with args, the machine root and, when
// libPath is not empty, LD_LIBRARY_PATH.
func runSMI(t *testing.T, u *UserSpace, root, libPath string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(u.NPUSMI(), args...)
	cmd.Env = []string{"NPU_STACK_TESTBED_ROOT=" + root}
	if libPath != "" {
		cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+libPath)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func TestNPUSMIInfoParsesPerModel(t *testing.T) {
	u := buildUserSpace(t)
	libs := strings.Join(u.LibDirs(), ":")
	withHealth := func(c Chips, bad map[int]string) Chips {
		for i, h := range bad {
			c.Chips[i].Health = h
		}
		return c
	}
	duo := withHealth(NewChips(Model310P, 4), map[int]string{3: "Alarm"})
	duo.ChipsPerCard = 2
	for _, tc := range []struct {
		name   string
		chips  Chips
		header string // a line of the vendor's layout for the model
	}{
		{"910B", withHealth(NewChips(Model910B, 8), map[int]string{2: "Critical", 5: "Warning"}),
			"| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)         |"},
		{"A3", withHealth(NewChips(ModelA3, 16), map[int]string{11: "Critical"}),
			"| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)         |"},
		{"310P", withHealth(NewChips(Model310P, 4), map[int]string{1: "UNKNOWN"}),
			"| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |"},
		{"310P Duo", duo,
			"| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeRoot(t, u, tc.chips, true)
			out, errOut, code := runSMI(t, u, root, libs, "info")
			if code != 0 {
				t.Fatalf("npu-smi info: exit %d, stderr %q, stdout:\n%s", code, errOut, out)
			}
			if !strings.Contains(out, tc.header+"\n") {
				t.Errorf("npu-smi info lacks the %s header line %q:\n%s", tc.name, tc.header, out)
			}
			info, err := npusmi.Parse([]byte(out))
			if err != nil {
				t.Fatalf("parse: %v\n%s", err, out)
			}
			if info.Version != "25.5.0" {
				t.Errorf("version %q, want 25.5.0", info.Version)
			}
			if len(info.Chips) != len(tc.chips.Chips) {
				t.Fatalf("%d chips parsed, want %d:\n%s", len(info.Chips), len(tc.chips.Chips), out)
			}
			for i, c := range info.Chips {
				if want := npusmi.ParseHealth(tc.chips.Chips[i].Health); c.Health != want {
					t.Errorf("chip %d (NPU %d chip %d): health %s, want %s", i, c.NPU, c.Chip, c.Health, want)
				}
			}
		})
	}
}

func TestNPUSMIFailuresAsUpstream(t *testing.T) {
	u := buildUserSpace(t)
	libs := strings.Join(u.LibDirs(), ":")
	healthy := NewChips(Model910B, 2)
	busy := NewChips(Model910B, 2)
	busy.DCMIInit = -8020
	for _, tc := range []struct {
		name        string
		chips       Chips
		loaded      bool
		libPath     string
		args        []string
		code        int
		out, errOut string
	}{
		{"no LD_LIBRARY_PATH", healthy, true, "", []string{"info"}, 127, "",
			"error while loading shared libraries: libdcmi.so: cannot open shared object file: No such file or directory"},
		{"lib64/common missing", healthy, true, filepath.Join(u.Dir, "driver", "lib64", "driver"), []string{"info"}, 127, "",
			"error while loading shared libraries: libc_sec.so: cannot open shared object file"},
		{"driver not loaded", healthy, false, libs, []string{"info"}, 187, "dcmi module initialize failed. ret is -8005\n", ""},
		{"device busy", busy, true, libs, []string{"info"}, 172, "dcmi model initialized failed, because the device is used. ret is -8020\n", ""},
		{"unknown command", healthy, true, libs, []string{"frobnicate"}, 211, "Command or option is not found.", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeRoot(t, u, tc.chips, tc.loaded)
			out, errOut, code := runSMI(t, u, root, tc.libPath, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stdout %q, stderr %q)", code, tc.code, out, errOut)
			}
			if !strings.Contains(out, tc.out) {
				t.Errorf("stdout %q, want it to contain %q", out, tc.out)
			}
			if !strings.Contains(errOut, tc.errOut) {
				t.Errorf("stderr %q, want it to contain %q", errOut, tc.errOut)
			}
		})
	}
}

// TestNPUSMIIncompleteInstallWarning: on 910-family hosts npu-smi warns
// after the table when /etc/ascend_install.info lacks
// Driver_Install_Status=complete; the product's parser still reads it.
func TestNPUSMIIncompleteInstallWarning(t *testing.T) {
	u := buildUserSpace(t)
	root := fakeRoot(t, u, NewChips(Model910B, 2), true)
	if err := os.WriteFile(filepath.Join(root, "etc/ascend_install.info"), []byte("Driver_Install_Path_Param=/usr/local/Ascend\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code := runSMI(t, u, root, strings.Join(u.LibDirs(), ":"), "info")
	const warning = "[WARNING]The driver package may not be completely installed, which may cause function abnormal. Please reinstall it.\n"
	if code != 0 || !strings.HasSuffix(out, warning) {
		t.Fatalf("exit %d, output does not end with the warning:\n%s", code, out)
	}
	if info, err := npusmi.Parse([]byte(out)); err != nil || len(info.Chips) != 2 {
		t.Fatalf("parse: %v, %d chips", err, len(info.Chips))
	}
}

// TestNPUSMIInAContainerSeesItsDevices: in a workload's container, which
// has the chips the device plugin allocated and not the test bed's chip
// state, npu-smi lists those chips, as the package's model.
func TestNPUSMIInAContainerSeesItsDevices(t *testing.T) {
	u := buildUserSpace(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"davinci_manager", "davinci3", "davinci5", "davinci_x"} {
		if err := os.WriteFile(filepath.Join(root, "dev", d), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "usr/local/Ascend/driver"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/local/Ascend/driver/version.info"), []byte(VersionInfo("25.5.0")), 0o444); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runSMI(t, u, root, strings.Join(u.LibDirs(), ":"), "info")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q:\n%s", code, errOut, out)
	}
	info, err := npusmi.Parse([]byte(out))
	if err != nil || len(info.Chips) != 2 || info.Chips[0].Name != "910B3" || len(info.Unhealthy()) != 0 {
		t.Fatalf("parse: %v, chips %+v\n%s", err, info.Chips, out)
	}
}
