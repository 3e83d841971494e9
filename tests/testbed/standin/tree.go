package standin

// The tree-mode driver image and the kernel modules a stand-in insmod
// loads (read-only roots, internal/drivertree).

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TreePath is where the stand-in tree-mode image keeps the installed
// driver tree: the chart's default driver.imageTreePath.
const TreePath = "/usr/local/Ascend/driver"

// ModeNormal is the normal install mode's module list, in upstream's
// unload order (hicann/driver v8.5.0 scripts/package/custom/driver/
// ascend910B/scripts/specific_func.inc l.14; ascend910_93's is the same;
// hicann/driver publishes no 310P package, so the stand-in 310P uses it
// too).
var ModeNormal = []string{"asdrv_queue", "asdrv_buff", "ts_agent", "ts_debug", "debug_switch", "npu_peermem", "asdrv_trs",
	"asdrv_esched", "asdrv_trsbase", "asdrv_svm", "asdrv_vnic", "drv_pcie_hdc_host", "asdrv_dms", "asdrv_fms", "asdrv_vmng",
	"ascend_soc_platform", "asdrv_dpa", "drv_pcie_host", "ascend_msg_chan_host", "asdrv_vpc", "drv_vascend", "drv_vascend_stub",
	"asdrv_pbl", "ascend_kernel_open_adapt", "drv_seclib_host"}

// SpecificFunc is the tree's script/specific_func.inc, with the lines
// the product reads.
func SpecificFunc() string {
	return "occupy_space=300\nvendor_bdf=\"0x19e5\"\ndevice_bdf=\"0xd802\"\nmode_normal=\"" + strings.Join(ModeNormal, "|") + "\"\nmode_debug=\"${mode_normal}\"\n"
}

// Module is a stand-in kernel module: what the kernel checks of a real
// one's .modinfo section (name, vermagic, depends), in the same layout
// of NUL-terminated key=value strings, without the ELF around it. The
// stand-in insmod refuses what the kernel refuses: no .modinfo (not a
// module), a vermagic of another kernel, a dependency not loaded.
type Module struct {
	Name     string
	Vermagic string
	Depends  []string
}

// Bytes is the module file.
func (m Module) Bytes() []byte {
	return fmt.Appendf(nil, "name=%s\x00vermagic=%s\x00depends=%s\x00", m.Name, m.Vermagic, strings.Join(m.Depends, ","))
}

// ParseModule reads a module file; an error is the kernel's ENOEXEC.
func ParseModule(b []byte) (Module, error) {
	var m Module
	fields := map[string]bool{}
	for _, kv := range bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if !ok {
			return m, errors.New("not a module")
		}
		fields[k] = true
		switch k {
		case "name":
			m.Name = v
		case "vermagic":
			m.Vermagic = v
		case "depends":
			if v != "" {
				m.Depends = strings.Split(v, ",")
			}
		}
	}
	if !fields["name"] || !fields["vermagic"] || m.Name == "" {
		return m, errors.New("no name or vermagic in .modinfo")
	}
	return m, nil
}

// TreeModules are the modules of model's package for kernel: each
// depends on every module upstream unloads after it (ModeNormal), the
// strictest dependencies that order allows, so only upstream's load
// order (its reverse) loads them all; drv_seclib_host, the library,
// comes first. Optional modules and npu_peermem, which upstream's loader
// may skip, are no one's dependency.
func TreeModules(model, kernel string) []Module {
	pkg := ModulesFor(model)
	skippable := []string{"host_notify", "drv_vascend", "tc_pcidev", "ascend_dms_mng", "npu_peermem"}
	var out []Module
	for _, name := range pkg {
		m := Module{Name: name, Vermagic: kernel + " SMP mod_unload"}
		if i := slices.Index(ModeNormal, name); i >= 0 {
			for _, dep := range ModeNormal[i+1:] {
				if slices.Contains(pkg, dep) && !slices.Contains(skippable, dep) {
					m.Depends = append(m.Depends, dep)
				}
			}
		}
		out = append(out, m)
	}
	return out
}

// DriverTreeImage is the tree-mode driver image of u's model for kernel:
// the installed tree at TreePath (version.info, lib64, tools/npu-smi,
// include), its script/specific_func.inc and host/*.ko. override
// replaces files (paths relative to the tree; a nil body removes one),
// for images that lack something.
func (u *UserSpace) DriverTreeImage(kernel string, override map[string][]byte) (v1.ImageIndex, error) {
	files := map[string]file{}
	tree := filepath.Join(u.Dir, "driver")
	err := filepath.Walk(tree, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, err := filepath.Rel(tree, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(filepath.Join(TreePath[1:], rel))] = file{mode: int64(fi.Mode().Perm()), body: b}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("stand-in tree image: %w", err)
	}
	files[TreePath[1:]+"/script/specific_func.inc"] = file{mode: 0o550, body: []byte(SpecificFunc())}
	for _, m := range TreeModules(u.Model, kernel) {
		files[TreePath[1:]+"/host/"+m.Name+".ko"] = file{mode: 0o440, body: m.Bytes()}
	}
	for rel, body := range override {
		name := TreePath[1:] + "/" + rel
		if body == nil {
			delete(files, name)
			continue
		}
		files[name] = file{mode: 0o444, body: body}
	}
	return image(files, v1.Config{Env: []string{basePATH}, Cmd: []string{"/bin/sh"}})
}
