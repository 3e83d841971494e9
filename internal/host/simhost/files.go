package simhost

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/openfuyao/npu-stack/internal/host"
)

// DriverRoot is where the simulated installer puts the driver tree by
// default: the vendor installer's default (host.DefaultDriverRoot), the
// chart's driver.hostDriverPath. Spec.DriverRoot changes it (KubeOS:
// /var/lib/Ascend/driver).
const DriverRoot = host.DefaultDriverRoot

// controlDevices appear with the driver next to one /dev/davinciN per
// chip (hicann/driver v8.5.0, scripts/package/custom/driver/ascend910B/
// scripts/host_sys_init.sh g_change_mode_dev_list).
var controlDevices = []string{"davinci_manager", "devmm_svm", "hisi_hdc"}

// loadedModules are the host driver's modules a loaded 910B driver shows
// in /sys/module, drv_pcie_host among them (hicann/driver v8.5.0,
// scripts/package/driver/ascend910B/driver.xml; specific_func.inc
// mode_normal).
var loadedModules = []string{"asdrv_pbl", "ascend_kernel_open_adapt", "asdrv_esched", "ascend_soc_platform", "asdrv_fms",
	"asdrv_trsbase", "asdrv_trs", "asdrv_svm", "asdrv_dms", "drv_pcie_hdc_host", "drv_pcie_host", "drv_seclib_host"}

// driverLibs are the libraries npu-smi loads, in the driver tree
// (hicann/driver main, src/custom/dev_prod/user/npucli/CMakeLists.txt;
// v8.5.0 driver.xml: lib64/driver and lib64/common).
var driverLibs = map[string]string{
	"libdcmi.so": "lib64/driver", "libdrvdsmi_host.so": "lib64/driver", "libascend_hal.so": "lib64/driver",
	"libdsmi_network.so": "lib64/driver", "libc_sec.so": "lib64/common", "libmmpa.so": "lib64/common",
}

// createDevices models the device nodes a loaded driver creates in /dev,
// as plain files (enough for code that lists them, such as CDI
// generation), mode 666 as with --install-for-all (host_sys_init.sh
// changeDavinciModeOnce).
func (h *Host) createDevices(st State) error {
	dev := h.Path("/dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return fmt.Errorf("simulated host %s: %w", h.Dir, err)
	}
	names := append([]string{}, controlDevices...)
	for i := 0; i < st.ChipCount; i++ {
		names = append(names, fmt.Sprintf("davinci%d", i))
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dev, n), nil, 0o666); err != nil {
			return fmt.Errorf("simulated host %s: %w", h.Dir, err)
		}
	}
	return nil
}

// loadModules models insmod: the modules appear in /sys/module.
func (h *Host) loadModules() error {
	for _, m := range loadedModules {
		if err := os.MkdirAll(h.Path(filepath.Join("/sys/module", m)), 0o755); err != nil {
			return fmt.Errorf("simulated host %s: %w", h.Dir, err)
		}
	}
	return nil
}

// unload models /sys/module and /dev after a reboot: no driver modules, no
// device nodes.
func (h *Host) unload() error {
	matches, err := filepath.Glob(filepath.Join(h.Path("/dev"), "davinci*"))
	if err != nil {
		return err
	}
	for _, n := range controlDevices[1:] {
		matches = append(matches, filepath.Join(h.Path("/dev"), n))
	}
	for _, m := range loadedModules {
		matches = append(matches, h.Path(filepath.Join("/sys/module", m)))
	}
	for _, m := range matches {
		if err := os.RemoveAll(m); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("simulated host %s: %w", h.Dir, err)
		}
	}
	return nil
}

// installFiles models what the vendor installer leaves on disk, at the
// paths it uses (docs/host-contract.md section 2): the driver tree with
// version.info and libraries, npu-smi (in /usr/local/{bin,sbin} with
// /usr/local/dcmi for the default tree; in <tree>/tools for a tree off
// /usr, as the precompiled image has it), the loader configuration and
// /etc/ascend_install.info. They survive reboots, as files on disk do.
func (h *Host) installFiles(st State, version string) error {
	root := st.driverRoot()
	files := map[string]string{
		filepath.Join(root, host.VersionFile):     "Version=" + version + "\nversion_dir=" + version + "\nascendhal_version=7.35.23\n",
		"/etc/ld.so.conf.d/ascend_driver_so.conf": strings.Join([]string{root + "/lib64/common", root + "/lib64/driver", root + "/lib64"}, "\n") + "\n",
	}
	for lib, dir := range driverLibs {
		files[filepath.Join(root, dir, lib)] = ""
	}
	smi := []string{filepath.Join(root, "tools", "npu-smi")}
	if root == host.DefaultDriverRoot {
		smi = host.NPUSMIPaths
		files[filepath.Join(host.DCMIDir, "libdcmi.so")] = ""
	}
	for _, p := range smi {
		files[p] = "#!simulated npu-smi\n"
	}
	for p, content := range files {
		if err := h.writeHostFile(p, content); err != nil {
			return err
		}
	}
	for _, p := range smi {
		if err := os.Chmod(h.Path(p), 0o555); err != nil {
			return fmt.Errorf("simulated host %s: %w", h.Dir, err)
		}
	}
	return h.updateInstallInfo(map[string]string{
		"UserName": "HwHiAiUser", "UserGroup": "HwHiAiUser", "Driver_Install_Type": "full",
		"Driver_Install_Path_Param": filepath.Dir(root), "Driver_Install_For_All": "yes",
		"Driver_Install_Mode": "normal", "Driver_Install_Status": "complete",
	})
}

// updateInstallInfo rewrites keys of /etc/ascend_install.info in place,
// keeping the others, as the installer's `sed -i "/${_key}=/d"; echo
// "${_key}=${_val}" >>` does (hicann/driver v8.5.0,
// scripts/package/custom/driver/common/scripts/common.sh
// updateInstallParam).
func (h *Host) updateInstallInfo(set map[string]string) error {
	old, err := os.ReadFile(h.Path(host.InstallInfoFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("simulated host %s: %w", h.Dir, err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(old)), "\n") {
		k, _, _ := strings.Cut(l, "=")
		if _, replaced := set[k]; l != "" && !replaced {
			lines = append(lines, l)
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		lines = append(lines, k+"="+set[k])
	}
	return h.writeHostFile(host.InstallInfoFile, strings.Join(lines, "\n")+"\n")
}

func (h *Host) writeHostFile(hostPath, content string) error {
	p := h.Path(hostPath)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("simulated host %s: %w", h.Dir, err)
	}
	_ = os.Remove(p) // replaced whole, even if read-only (npu-smi is 555)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		return fmt.Errorf("simulated host %s: %w", h.Dir, err)
	}
	return nil
}
