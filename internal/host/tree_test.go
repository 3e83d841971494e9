package host

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kubeOS is a host root whose /usr and /lib are read-only and /var
// writable, as KubeOS mounts them.
func kubeOS(t *testing.T) *Linux {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"usr/local/bin", "lib/modules", "var/lib", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &Linux{Root: root, DriverRoot: "/var/lib/Ascend/driver", ReadOnly: func(p string) (bool, error) {
		return strings.HasPrefix(p, "/usr") || strings.HasPrefix(p, "/lib") || p == "/", nil
	}}
}

func TestRunModeRefusesAReadOnlyRoot(t *testing.T) {
	err := kubeOS(t).CheckRunTargets()
	if _, ok := IsProblem(err); !ok || !strings.Contains(err.Error(), "installMode: tree") {
		t.Fatalf("got %v; want a host problem naming installMode: tree", err)
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

func TestInstallTreeSwapsTheWholeTree(t *testing.T) {
	l := kubeOS(t)
	ctx := context.Background()
	image := func(version string) string {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"version.info": "Version=" + version + "\n", "script/specific_func.inc": "mode_normal=\"drv_pcie_host\"\n",
			"tools/npu-smi": "", "host/drv_pcie_host.ko": "", "lib64/only-in-" + version: ""})
		if err := os.Symlink("npu-smi", filepath.Join(dir, "tools", "link")); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	if v, whole, err := l.InstalledTree(); err != nil || v != "" || whole {
		t.Fatalf("empty host: %q %v %v", v, whole, err)
	}
	if err := l.InstallTree(ctx, "25.5.0", image("25.5.0")); err != nil {
		t.Fatal(err)
	}
	if err := l.InstallTree(ctx, "25.6.0", image("25.6.0")); err != nil {
		t.Fatal(err)
	}
	if v, whole, err := l.InstalledTree(); err != nil || v != "25.6.0" || !whole {
		t.Fatalf("after the upgrade: %q %v %v", v, whole, err)
	}
	tree := l.Path("/var/lib/Ascend/driver")
	if _, err := os.Stat(filepath.Join(tree, "lib64/only-in-25.5.0")); !os.IsNotExist(err) {
		t.Fatalf("a file of the old tree survived the swap: %v", err)
	}
	if target, err := os.Readlink(filepath.Join(tree, "tools/link")); err != nil || target != "npu-smi" {
		t.Fatalf("symlink: %q %v", target, err)
	}
	if _, err := os.Stat(tree + stagingSuffix); !os.IsNotExist(err) {
		t.Fatalf("the replaced tree was left: %v", err)
	}
	info, err := os.ReadFile(l.Path(InstallInfoFile))
	if err != nil || !strings.Contains(string(info), "Driver_Install_Path_Param=/var/lib/Ascend\n") || !strings.HasSuffix(string(info), "Driver_Install_Status=complete\n") {
		t.Fatalf("%s: %q %v", InstallInfoFile, info, err)
	}
	if st, err := ReadInstallState(l.Path, "/var/lib/Ascend/driver"); err != nil || st.Half {
		t.Fatalf("install state %+v %v", st, err)
	}
	// An image of another version than driver.version is refused.
	if err := l.InstallTree(ctx, "25.7.0", image("25.6.0")); err == nil || !strings.Contains(err.Error(), "not driver.version 25.7.0") {
		t.Fatalf("version mismatch: %v", err)
	}
	// A tree on a read-only path is refused before anything is copied.
	l.DriverRoot = "/usr/local/Ascend/driver"
	if err := l.InstallTree(ctx, "25.6.0", image("25.6.0")); err == nil || !strings.Contains(err.Error(), "/var/lib/Ascend/driver") {
		t.Fatalf("read-only tree: %v", err)
	}
}
