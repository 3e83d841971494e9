package standin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ControlDevices are the driver's device nodes besides /dev/davinci<N>
// (hicann/driver v8.5.0 scripts/package/custom/driver/ascend910B/scripts/
// host_sys_init.sh g_change_mode_dev_list; docs/host-contract.md section 4).
var ControlDevices = []string{"davinci_manager", "devmm_svm", "hisi_hdc"}

// LoadDriver "loads" the stand-in driver on a machine whose paths path
// maps to the host, as the stand-in package does when no driver is loaded
// and as a boot does with the modules the package left: a directory per
// module in /sys/module (the test bed's nodes keep a tmpfs there), the
// device nodes /dev/davinci<N> per chip and ControlDevices, and the chips
// beside them (DevChipsFile). There is no Ascend kernel driver, so the
// device nodes are character devices with /dev/null's major and minor
// (1, 3); mode is 0666 after --install-for-all, 0660 otherwise
// (host_sys_init.sh), owned by root (the HwHiAiUser owner the vendor's
// boot script sets is left to the caller).
func LoadDriver(path func(string) string, modules []string, c Chips, mode os.FileMode) error {
	for _, m := range modules {
		if err := os.MkdirAll(path(filepath.Join("/sys/module", m)), 0o755); err != nil {
			return fmt.Errorf("load the stand-in driver: module %s: %w", m, err)
		}
	}
	if err := os.MkdirAll(path("/dev"), 0o755); err != nil {
		return fmt.Errorf("load the stand-in driver: %w", err)
	}
	names := append([]string{}, ControlDevices...)
	for i := range c.Chips {
		names = append(names, fmt.Sprintf("davinci%d", i))
	}
	for _, n := range names {
		p := path("/dev/" + n)
		err := unix.Mknod(p, unix.S_IFCHR|uint32(mode.Perm()), int(unix.Mkdev(1, 3)))
		if err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("load the stand-in driver: mknod /dev/%s: %w", n, err)
		}
		// mknod applies the umask.
		if err := os.Chmod(p, mode.Perm()); err != nil {
			return fmt.Errorf("load the stand-in driver: %w", err)
		}
	}
	return WriteChips(path, c)
}
