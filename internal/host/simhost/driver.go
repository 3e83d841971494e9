// The driver on the simulated host: its installer (the package's files, the
// upstream exit codes) and the modules a boot loads.

package simhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/openfuyao/npu-stack/internal/host"
)

// LoadDriver simulates insmod of a driver version.
func (h *Host) LoadDriver(version string) error {
	return h.Update(func(st *State) error {
		if st.LoadedDriver != "" && st.LoadedDriver != version {
			// The real chips do not survive rmmod; neither does the model.
			return fmt.Errorf("simulated host %s: driver %s already loaded, cannot load %s without a reboot", h.Dir, st.LoadedDriver, version)
		}
		st.LoadedDriver = version
		if err := h.loadModules(); err != nil {
			return err
		}
		return h.createDevices(*st)
	})
}

// LoadedDriver is the production answer over this machine's root.
func (h *Host) LoadedDriver(ctx context.Context) (string, error) { return h.linux.LoadedDriver(ctx) }

// InstallDriver does what the vendor installer does on the host: after
// the production precondition (host.Linux.CheckDriverTree, which refuses
// a read-only driver tree), it writes the driver files at their real paths
// and, with no driver loaded, loads the modules; over a loaded driver it
// only replaces the files, and the next boot loads them ("Reboot needed
// for installation/upgrade to take effect", hicann/driver v8.5.0
// driver_install.sh installationCompletionMessage). argv is recorded, not
// executed: the driver image's installer is the vendor's. With
// InstallFailure set it fails half-way as an installer that dies after
// copying part of the tree.
func (h *Host) InstallDriver(_ context.Context, version string, argv []string) error {
	if version == "" {
		return fmt.Errorf("simulated host %s: install of an empty driver version", h.Dir)
	}
	if err := h.linux.CheckDriverTree(); err != nil {
		return err
	}
	st, err := h.State()
	if err != nil {
		return err
	}
	if st.InstallFailure != "" {
		return h.failInstall(version, argv, st)
	}
	if st.LoadedDriver == "" {
		if err := h.LoadDriver(version); err != nil {
			return err
		}
	}
	return h.Update(func(st *State) error {
		st.Installs++
		st.LastInstallCommand = argv
		st.InstalledDriver = version
		return h.installFiles(*st, version)
	})
}

// failInstall leaves what an installer dying half-way leaves: part of the
// tree (libraries, no version.info: an overwrite install uninstalls the
// old package first), nothing more loaded, nothing a boot would load,
// the install record without Driver_Install_Status=complete.
func (h *Host) failInstall(version string, argv []string, st State) error {
	root := st.driverRoot()
	if err := os.Remove(h.Path(filepath.Join(root, host.VersionFile))); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("simulated host %s: %w", h.Dir, err)
	}
	if err := h.writeHostFile(filepath.Join(root, "lib64/driver/libdrvdsmi_host.so"), ""); err != nil {
		return err
	}
	if err := h.updateInstallInfo(map[string]string{"Driver_Install_Path_Param": filepath.Dir(root)}); err != nil {
		return err
	}
	if err := h.Update(func(st *State) error {
		st.Installs++
		st.LastInstallCommand = argv
		st.InstalledDriver = ""
		return nil
	}); err != nil {
		return err
	}
	out := []byte(st.InstallFailure + "\n")
	return &host.ExitError{Command: strings.Join(argv, " "), Code: 1, Output: out, Stderr: out}
}
