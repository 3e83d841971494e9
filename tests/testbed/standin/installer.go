package standin

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

//go:embed installer/driver.run.sh
var runScript string

// HostModules are the kernel modules of the driver package (*.ko in
// <install>/driver/host): hicann/driver v8.5.0
// scripts/package/driver/ascend910B/driver.xml (docs/host-contract.md
// section 1). A3 (ascend910_93) adds tc_pcidev. No 310P package is
// published in hicann/driver; the stand-in 310P package carries the same
// list.
var HostModules = []string{"asdrv_pbl", "ascend_kernel_open_adapt", "asdrv_esched", "ascend_soc_platform", "asdrv_fms",
	"asdrv_trsbase", "asdrv_trs", "asdrv_svm", "asdrv_dms", "asdrv_dpa", "drv_pcie_hdc_host", "drv_pcie_host", "asdrv_vnic",
	"drv_seclib_host", "asdrv_queue", "asdrv_buff", "drv_vascend_stub", "asdrv_vmng", "drv_vascend", "asdrv_vpc", "ts_agent",
	"asdrv_vvpc", "drv_virtmng_host_stub", "asdrv_vtrs", "ts_agent_vm"}

// LoadedModules are the modules a loaded driver shows in /sys/module in
// normal mode (hicann/driver v8.5.0 scripts/package/custom/driver/
// ascend910B/scripts/specific_func.inc mode_normal; the same list as
// internal/host/simhost), drv_pcie_host among them.
var LoadedModules = []string{"asdrv_pbl", "ascend_kernel_open_adapt", "asdrv_esched", "ascend_soc_platform", "asdrv_fms",
	"asdrv_trsbase", "asdrv_trs", "asdrv_svm", "asdrv_dms", "drv_pcie_hdc_host", "drv_pcie_host", "drv_seclib_host"}

// ModulesFor is the package's module list for a chip model.
func ModulesFor(model string) []string {
	m := append([]string{}, HostModules...)
	if model == ModelA3 {
		m = append(m, "tc_pcidev")
	}
	return m
}

// WriteRun writes the stand-in driver package of u's model to path: a
// self-extracting shell script (the vendor's package is a makeself .run)
// whose payload is u's driver tree with the kernel modules (empty files),
// and libdcmi.so and the headers for /usr/local/dcmi. Run as the vendor's
// .run is run (`<run> --full --quiet [--install-for-all]
// [--install-path=<p>]`, chrooted into the host), it has the vendor
// installer's file effects; installer/driver.run.sh says which and where
// they come from.
func (u *UserSpace) WriteRun(path string) error {
	model := u.Model
	payload, err := u.payload(model)
	if err != nil {
		return fmt.Errorf("stand-in driver package: %w", err)
	}
	script := strings.NewReplacer(
		"@VERSION@", u.Version,
		"@MODULES@", strings.Join(ModulesFor(model), " "),
		"@LOADED@", strings.Join(LoadedModules, " "),
	).Replace(runScript)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("stand-in driver package: %w", err)
	}
	if err := os.WriteFile(path, append([]byte(script), payload...), 0o755); err != nil {
		return fmt.Errorf("stand-in driver package: %w", err)
	}
	return nil
}

// payload is the tar.gz the .run extracts: driver/... and dcmi/libdcmi.so.
func (u *UserSpace) payload(model string) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	mtime := time.Unix(0, 0)
	add := func(name string, mode int64, body []byte) error {
		return writeTarFile(tw, name, mode, body, mtime)
	}
	tree := filepath.Join(u.Dir, "driver")
	err := filepath.Walk(tree, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, err := filepath.Rel(u.Dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return add(filepath.ToSlash(rel), int64(fi.Mode().Perm()), b)
	})
	if err != nil {
		return nil, err
	}
	for _, m := range ModulesFor(model) {
		if err := add("driver/host/"+m+".ko", 0o440, nil); err != nil {
			return nil, err
		}
	}
	dcmi, err := os.ReadFile(filepath.Join(tree, "lib64", "driver", "libdcmi.so"))
	if err != nil {
		return nil, err
	}
	if err := add("dcmi/libdcmi.so", 0o444, dcmi); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeTarFile(tw *tar.Writer, name string, mode int64, body []byte, mtime time.Time) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body)), Typeflag: tar.TypeReg, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err := tw.Write(body)
	return err
}
