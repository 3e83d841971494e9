// Package drivertree is what a driver image must hold for each install
// mode, and how a read-only-root node loads a driver tree's modules.
//
// Two install modes exist. "run": the image carries the vendor's
// self-extracting .run package (driver.installCommand[0]), run chrooted
// into the host, which writes /usr/local, /lib/modules and /lib (hicann/
// driver v8.5.0 driver_atlas.xml, deal_ko.sh, run_driver_install.sh).
// "tree": for hosts whose / is read-only (KubeOS mounts / read-only, /var
// is a bind mount and /etc an overlay: openeuler-mirror/KubeOS files/
// *.mount), the image carries an installed driver tree, kernel modules
// included, that the driver pod copies into a writable host path and
// loads from there at every boot.
package drivertree

import (
	"fmt"
	"path"
)

// Install modes (driver.profiles[].installMode).
const (
	ModeRun  = "run"
	ModeTree = "tree"
)

// DefaultImageTree is where a tree-mode image holds the driver tree: the
// vendor installer's default tree (--install-path /usr/local/Ascend, the
// tree its driver/ directory; hicann/driver v8.5.0 args_parse.sh
// Install_Path_Param).
const DefaultImageTree = "/usr/local/Ascend/driver"

// Files of an installed driver tree, relative to it, that tree mode needs.
const (
	// VersionFile holds Version=<version> (run_driver_install.sh copies
	// version.info into <install-path>/driver/).
	VersionFile = "version.info"
	// ModuleDir holds the kernel modules: the package's driver/host
	// (driver.xml <file_info value="host" dst_path="driver/host">), which
	// the .run installer copies to /lib/modules/$(uname -r)/updates and
	// then deletes (deal_ko.sh driver_auto_insmod, run_driver_install.sh
	// delete_tmp_ko_dirs). A tree-mode image keeps it.
	ModuleDir = "host"
	// SpecificFunc is the chip's module list (specific_func.inc
	// mode_normal, installed under driver/script: device_hot_reset.sh
	// sources ${Driver_Install_Path_Param}/driver/script/specific_func.inc).
	SpecificFunc = "script/specific_func.inc"
	// NPUSMI is npu-smi inside the tree (/var/lib/Ascend/driver/tools/npu-smi
	// on KubeOS: docs/host-contract.md, ANO-UPG).
	NPUSMI = "tools/npu-smi"
)

// Required is what an image of mode must hold, as absolute paths in the
// image: for run, the installer (installCommand[0]); for tree, the files
// of the tree under imageTree and one module at least (ModuleDir + "/",
// checked as a directory holding a *.ko).
func Required(mode, installer, imageTree string) ([]string, error) {
	switch mode {
	case "", ModeRun:
		if installer == "" {
			return nil, fmt.Errorf("install mode %q needs driver.installCommand", ModeRun)
		}
		return []string{installer}, nil
	case ModeTree:
		if imageTree == "" {
			imageTree = DefaultImageTree
		}
		return []string{
			path.Join(imageTree, VersionFile),
			path.Join(imageTree, SpecificFunc),
			path.Join(imageTree, NPUSMI),
			path.Join(imageTree, ModuleDir) + "/",
		}, nil
	}
	return nil, fmt.Errorf("install mode %q: want %q or %q", mode, ModeRun, ModeTree)
}

// ModuleListVar is the shell variable of SpecificFunc listing the normal
// install mode's modules in the order upstream unloads them: dependents
// first, drv_seclib_host (the library every module uses) last
// (device_hot_reset.sh remove_all_ko rmmods ${mode_normal//|/ } in order,
// drv_seclib_host at the end). Loading is the reverse.
const ModuleListVar = "mode_normal"
