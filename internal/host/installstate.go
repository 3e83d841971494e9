package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// InstallStatusComplete is the line the vendor installer appends to
// /etc/ascend_install.info when an install ends well (hicann/driver
// v8.5.0, scripts/package/custom/driver/common/scripts/install.sh l.82);
// its uninstall deletes it (run_driver_uninstall.sh l.441), and an
// overwrite install uninstalls first (driver_install.sh).
const InstallStatusComplete = "Driver_Install_Status=complete"

// InstallState is what the driver's files on a host say of the last
// install.
type InstallState struct {
	// Half is an install or uninstall that stopped half-way: npu-smi,
	// the loader and the next boot would meet a partial package.
	Half bool
	// Why says what is missing, for the event that names the repair.
	Why string
}

// ReadInstallState judges the driver tree at driverRoot (a host path)
// and /etc/ascend_install.info, as this process reaches them through path
// (Host.Path). Half-installed (docs/host-contract.md section 2): files of
// a package present in the tree while its version.info is missing (the
// overwrite install removes version.info first, driver_install.sh
// uninstallRun), or the install record naming an install path without
// Driver_Install_Status=complete. No tree and no record is a host with no
// driver installed, not a half-installed one.
func ReadInstallState(path func(hostPath string) string, driverRoot string) (InstallState, error) {
	info, err := os.ReadFile(path(InstallInfoFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return InstallState{}, fmt.Errorf("read %s: %w", InstallInfoFile, err)
	}
	recorded, complete := false, false
	for _, line := range strings.Split(string(info), "\n") {
		line = strings.TrimSpace(line)
		recorded = recorded || strings.HasPrefix(line, "Driver_Install_Path_Param=")
		complete = complete || line == InstallStatusComplete
	}
	if recorded && !complete {
		return InstallState{Half: true, Why: fmt.Sprintf("%s records a driver install without %s", InstallInfoFile, InstallStatusComplete)}, nil
	}
	entries, err := os.ReadDir(path(driverRoot))
	if errors.Is(err, os.ErrNotExist) {
		return InstallState{}, nil
	}
	if err != nil {
		return InstallState{}, fmt.Errorf("read the driver tree %s: %w", driverRoot, err)
	}
	if len(entries) == 0 {
		return InstallState{}, nil
	}
	_, err = os.Stat(path(filepath.Join(driverRoot, VersionFile)))
	switch {
	case err == nil:
		return InstallState{}, nil
	case errors.Is(err, os.ErrNotExist):
		return InstallState{Half: true, Why: fmt.Sprintf("the driver tree %s holds files but no %s", driverRoot, VersionFile)}, nil
	default:
		return InstallState{}, fmt.Errorf("check %s: %w", filepath.Join(driverRoot, VersionFile), err)
	}
}
