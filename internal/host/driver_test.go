package host

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree lays out files (host path -> content) under a host root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The version.info of hicann/driver v8.5.0 (version_info.py
// _get_content: Version= first, then version_dir, timestamp and the
// interface versions of driver/common/conf/itf_ver.conf).
const versionInfo = "Version=25.5.0\nversion_dir=25.5.0\ntimestamp=20251230_103012345\nascendhal_version=7.35.23\naicpu_version=1.0\ntdt_version=1.0\n"

func TestLoadedDriver(t *testing.T) {
	const vi = DefaultDriverRoot + "/version.info"
	for _, tc := range []struct {
		name    string
		files   map[string]string
		want    string
		problem []string // words the *ProblemError must contain; nil = no error
	}{
		{name: "fresh boot, driver on disk, no module", files: map[string]string{vi: versionInfo}},
		{name: "physical machine", files: map[string]string{"/sys/module/drv_pcie_host/": "", vi: versionInfo}, want: "25.5.0"},
		{name: "compute-sliced VM", files: map[string]string{"/sys/module/drv_vpcie/": "", vi: versionInfo}, want: "25.5.0"},
		{name: "lower-case key", files: map[string]string{"/sys/module/drv_pcie_host/": "", vi: "version=24.1.rc3\n"}, want: "24.1.rc3"},
		// No such module exists in hicann/driver: a file there proves nothing.
		{name: "invented module", files: map[string]string{"/sys/module/drv_davinci_host/version": "25.5.0\n", vi: versionInfo}},
		{name: "module loaded, version.info missing",
			files:   map[string]string{"/sys/module/drv_pcie_host/": ""},
			problem: []string{"drv_pcie_host", vi, "driver.hostDriverPath", "/var/lib/Ascend/driver"}},
		{name: "module loaded, version.info garbled",
			files:   map[string]string{"/sys/module/drv_pcie_host/": "", vi: "25.5.0\n"},
			problem: []string{vi, "no Version=", "driver.hostDriverPath"}},
		{name: "module loaded, empty Version=",
			files:   map[string]string{"/sys/module/drv_vpcie/": "", vi: "Version=\n"},
			problem: []string{vi, "empty"}},
		{name: "installed elsewhere, as the installer recorded",
			files: map[string]string{"/sys/module/drv_pcie_host/": "", "/var/lib/Ascend/driver/version.info": versionInfo,
				InstallInfoFile: "UserName=HwHiAiUser\nDriver_Install_Path_Param=/var/lib/Ascend\nDriver_Install_Status=complete\n"},
			problem: []string{vi, "/var/lib/Ascend/driver", InstallInfoFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, tc.files)
			got, err := NewLinux(root).LoadedDriver(context.Background())
			if tc.problem == nil {
				if err != nil || got != tc.want {
					t.Fatalf("LoadedDriver = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			pe, ok := IsProblem(err)
			if !ok {
				t.Fatalf("LoadedDriver = %q, %v; want a *ProblemError", got, err)
			}
			for _, w := range tc.problem {
				if !strings.Contains(pe.Error(), w) {
					t.Errorf("problem %q does not name %q", pe.Error(), w)
				}
			}
		})
	}
}
