// Package standin builds the test bed's stand-ins for the vendor's
// artefacts on an Ascend node, as real executables and OCI images that
// the real nodes (tests/testbed/realnode) run: the driver's user space
// (stand-in libraries with the vendor's sonames at their places in the
// driver tree, and an npu-smi linked against them), the driver package's
// installer with the vendor installer's file effects, and the MindCluster
// v7.3.0 device plugin and exporter images. Every path, name, layout and
// message is the one docs/host-contract.md gives with its upstream
// source; what a stand-in cannot be (a kernel driver) is said where it is
// modelled.
package standin

import (
	"context"
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

//go:embed csrc/*.c csrc/*.h
var csrc embed.FS

// Libraries are the libraries npu-smi links (hicann/driver main,
// src/custom/dev_prod/user/npucli/CMakeLists.txt), by their directory in
// the driver tree (hicann/driver v8.5.0 driver.xml: lib64/driver,
// lib64/common); docs/host-contract.md section 3.
var Libraries = map[string]string{
	"libdcmi.so":         "lib64/driver",
	"libdrvdsmi_host.so": "lib64/driver",
	"libascend_hal.so":   "lib64/driver",
	"libdsmi_network.so": "lib64/driver",
	"libc_sec.so":        "lib64/common",
	"libmmpa.so":         "lib64/common",
}

// UserSpace is a built stand-in driver user space.
type UserSpace struct {
	// Dir holds driver/ (the tree the installer copies to
	// <install-path>/driver: lib64/driver, lib64/common, tools/npu-smi)
	// and bin/dcmi-query (the device plugin's helper, not part of the
	// driver package).
	Dir string
	// Version is the package's version: npu-smi's tool version and the
	// Version= of its version.info.
	Version string
	// Model is the chip model the package is for (Model910B, ModelA3,
	// Model310P): the vendor ships one driver package per chip.
	Model string
}

// NPUSMI is the built npu-smi (in the tree's tools/, where the package
// carries it, hicann/driver v8.5.0 driver_atlas.xml).
func (u *UserSpace) NPUSMI() string { return filepath.Join(u.Dir, "driver", "tools", "npu-smi") }

// DCMIQuery is the built helper of the stand-in device plugin.
func (u *UserSpace) DCMIQuery() string { return filepath.Join(u.Dir, "bin", "dcmi-query") }

// LibDirs are the tree's library directories, in the order of the
// installer's loader configuration (hicann/driver v8.5.0
// host_servers_setup.sh so_ldconfig: lib64/common, lib64/driver, lib64).
func (u *UserSpace) LibDirs() []string {
	t := filepath.Join(u.Dir, "driver")
	return []string{filepath.Join(t, "lib64", "common"), filepath.Join(t, "lib64", "driver"), filepath.Join(t, "lib64")}
}

// BuildUserSpace compiles the stand-in libraries, npu-smi and dcmi-query
// of model's package with gcc into dir for the machine's architecture (the
// real nodes run on this machine) and writes the tree's version.info and
// headers.
func BuildUserSpace(ctx context.Context, dir, version, model string) (*UserSpace, error) {
	if strings.ContainsAny(version, "\"\\\n") || version == "" {
		return nil, fmt.Errorf("stand-in driver: version %q: want a non-empty string without quotes, backslashes or newlines", version)
	}
	if err := checkModel(model); err != nil {
		return nil, fmt.Errorf("stand-in driver: %w", err)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, fmt.Errorf("stand-in driver: %w", err)
	}
	entries, err := csrc.ReadDir("csrc")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := csrc.ReadFile("csrc/" + e.Name())
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(src, e.Name()), b, 0o644); err != nil {
			return nil, fmt.Errorf("stand-in driver: %w", err)
		}
	}
	u := &UserSpace{Dir: dir, Version: version, Model: model}
	tree := filepath.Join(dir, "driver")
	for _, d := range []string{"lib64/driver", "lib64/common", "tools", "include"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			return nil, fmt.Errorf("stand-in driver: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return nil, fmt.Errorf("stand-in driver: %w", err)
	}
	gcc := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "gcc", append([]string{"-O2", "-Wall", "-Werror"}, args...)...)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("stand-in driver: gcc %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	for lib, sub := range Libraries {
		out := filepath.Join(tree, sub, lib)
		args := []string{"-shared", "-fPIC", "-Wl,-soname," + lib, "-o", out}
		if lib == "libdcmi.so" {
			args = append(args, `-DSTANDIN_MODEL="`+model+`"`, "dcmi.c")
		} else {
			stem := strings.TrimSuffix(strings.TrimPrefix(lib, "lib"), ".so")
			args = append(args, "-DLIBSYM=npu_stack_standin_"+stem, "stub.c")
		}
		if err := gcc(args...); err != nil {
			return nil, err
		}
	}
	// --no-as-needed: every library stays a DT_NEEDED entry, as in the
	// vendor's binary, whatever the distribution's linker default.
	link := []string{"-o", u.NPUSMI(), "npu-smi.c", `-DTOOL_VERSION="` + version + `"`,
		"-L" + filepath.Join(tree, "lib64", "driver"), "-L" + filepath.Join(tree, "lib64", "common"),
		"-Wl,--no-as-needed", "-ldcmi", "-ldsmi_network", "-lc_sec", "-ldrvdsmi_host", "-lmmpa", "-lascend_hal"}
	if err := gcc(link...); err != nil {
		return nil, err
	}
	if err := gcc("-o", u.DCMIQuery(), "dcmi-query.c", "-ldl"); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tree, "version.info"), []byte(VersionInfo(version)), 0o444); err != nil {
		return nil, fmt.Errorf("stand-in driver: %w", err)
	}
	// The headers a --full install puts in driver/include and
	// /usr/local/dcmi (hicann/driver v8.5.0 scripts/package/custom/driver/
	// ascend910B/driver_atlas.xml): stand-in contents under the vendor's
	// names.
	dcmiH, err := csrc.ReadFile("csrc/dcmi.h")
	if err != nil {
		return nil, err
	}
	for name, body := range map[string][]byte{
		"dcmi_interface_api.h":           dcmiH,
		"dsmi_common_interface_custom.h": []byte("/* npu-stack test bed: stand-in for the vendor's header of this name. */\n"),
	} {
		if err := os.WriteFile(filepath.Join(tree, "include", name), body, 0o444); err != nil {
			return nil, fmt.Errorf("stand-in driver: %w", err)
		}
	}
	return u, nil
}

// VersionInfo is the driver tree's version.info: Version= first, then the
// interface versions (hicann/driver v8.5.0 scripts/package/common/py/
// version_info.py VersionInfoFile._get_content(),
// scripts/package/driver/common/conf/itf_ver.conf).
func VersionInfo(version string) string {
	return "Version=" + version + "\n" +
		"ascendhal_version=7.35.23\naicpu_version=1.0\ntdt_version=1.0\nlog_version=1.0\n" +
		"prof_version=2.0\ndvppkernels_version=1.1\ntsfw_version=1.0\n"
}
