package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/openfuyao/npu-stack/internal/drivertree"
)

// DefaultDriverRoot is the vendor installer's default driver tree: its
// --install-path defaults to /usr/local/Ascend and the tree is the
// install path's driver/ (hicann/driver v8.5.0,
// scripts/package/custom/driver/common/scripts/args_parse.sh l.321,
// Install_Path_Param="/usr/local/Ascend").
const DefaultDriverRoot = "/usr/local/Ascend/driver"

// DriverModules are the kernel modules whose presence proves a loaded
// host driver: drv_pcie_host on a physical machine, drv_vpcie in a
// compute-sliced VM. The vendor installer asks exactly this with
// `lsmod | grep -E "drv_pcie_host|drv_vpcie"` (hicann/driver v8.5.0,
// scripts/package/custom/driver/common/scripts/env_check.sh l.264-266);
// /sys/module/<name> is lsmod's source for a loaded module.
var DriverModules = []string{"drv_pcie_host", "drv_vpcie"}

// VersionFile is the driver tree's version file, copied by the installer
// into <install-path>/driver/ (hicann/driver v8.5.0,
// scripts/package/custom/driver/common/scripts/run_driver_install.sh
// l.105-110).
const VersionFile = "version.info"

// InstallInfoFile is where the installer records its install path
// (Driver_Install_Path_Param, without /driver) (hicann/driver v8.5.0,
// scripts/package/custom/driver/common/scripts/driver_install.sh
// updateInstallInfo()).
const InstallInfoFile = "/etc/ascend_install.info"

// ParseVersionInfo is drivertree.ParseVersionInfo.
func ParseVersionInfo(b []byte) (string, error) { return drivertree.ParseVersionInfo(b) }

// LoadedDriver is the version of the driver in the running kernel: ""
// when neither drv_pcie_host nor drv_vpcie is loaded; else the Version=
// of <DriverRoot>/version.info. Modules loaded with that file missing or
// unreadable is a host problem: the driver was installed elsewhere than
// driver.hostDriverPath says, or its tree was damaged.
func (l *Linux) LoadedDriver(_ context.Context) (string, error) {
	module, err := l.loadedModule()
	if err != nil || module == "" {
		return "", err
	}
	root := l.driverRoot()
	file := filepath.Join(root, VersionFile)
	b, err := os.ReadFile(l.Path(file))
	if err == nil {
		v, perr := ParseVersionInfo(b)
		if perr == nil {
			return v, nil
		}
		err = perr
	}
	return "", &ProblemError{
		What: fmt.Sprintf("driver module %s is loaded but the driver version cannot be read from %s", module, file),
		Fix:  l.versionFix(root),
		Err:  err,
	}
}

// loadedModule names the first of DriverModules loaded, "" if none.
func (l *Linux) loadedModule() (string, error) {
	for _, m := range DriverModules {
		_, err := os.Stat(l.Path(filepath.Join("/sys/module", m)))
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("look for kernel module %s under /sys/module: %w", m, err)
		}
	}
	return "", nil
}

// versionFix says where the driver tree really is when the installer's
// record names another install path, else what else to check.
func (l *Linux) versionFix(root string) string {
	const reinstall = "if the tree is damaged, reinstall the driver (the driver pod does on the next reboot)"
	installed := l.installPath()
	if installed != "" && filepath.Join(installed, "driver") != filepath.Clean(root) {
		return fmt.Sprintf("%s records the driver installed under %s: set driver.hostDriverPath (or the node's driver.profiles[].hostDriverPath) to %s; %s",
			InstallInfoFile, installed, filepath.Join(installed, "driver"), reinstall)
	}
	return fmt.Sprintf("check that driver.hostDriverPath (or the node's driver.profiles[].hostDriverPath) is the host's driver tree (%s by default; /var/lib/Ascend/driver on KubeOS); %s", DefaultDriverRoot, reinstall)
}

// installPath is Driver_Install_Path_Param of the installer's record, ""
// when there is none.
func (l *Linux) installPath() string {
	b, err := os.ReadFile(l.Path(InstallInfoFile))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Driver_Install_Path_Param="); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func (l *Linux) driverRoot() string {
	if l.DriverRoot == "" {
		return DefaultDriverRoot
	}
	return l.DriverRoot
}
