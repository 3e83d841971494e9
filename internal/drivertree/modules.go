package drivertree

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// Module is one kernel module to load.
type Module struct {
	Name string
	// Optional: a failure to load it is not an install failure. Upstream
	// ignores modprobe failures of host_notify, drv_vascend, tc_pcidev
	// and ascend_dms_mng (hicann/driver v8.5.0 deal_ko.sh
	// modprobe_host_kos).
	Optional bool
}

// optional are the modules upstream's loader lets fail (Module.Optional).
var optional = []string{"host_notify", "drv_vascend", "tc_pcidev", "ascend_dms_mng"}

// ParseModuleList reads ModuleListVar's value from a specific_func.inc:
// the line mode_normal="a|b|c" (hicann/driver v8.5.0 scripts/package/
// custom/driver/ascend910B/scripts/specific_func.inc). The file is shell,
// but this one assignment is a plain quoted string there; anything else
// (a variable reference, no such line) is refused rather than guessed.
func ParseModuleList(b []byte) ([]string, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		val, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), ModuleListVar+"=")
		if !ok {
			continue
		}
		if len(val) < 2 || val[0] != '"' || val[len(val)-1] != '"' || strings.ContainsAny(val[1:len(val)-1], "\"$`\\ ") {
			return nil, fmt.Errorf("%s=%s is not a quoted list of module names separated by |", ModuleListVar, val)
		}
		var mods []string
		for _, m := range strings.Split(val[1:len(val)-1], "|") {
			if m == "" {
				return nil, fmt.Errorf("%s=%s has an empty module name", ModuleListVar, val)
			}
			mods = append(mods, m)
		}
		return mods, nil
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no %s=\"...\" line", ModuleListVar)
}

// LoadOrder is the modules to insmod, in order: listed (ModuleListVar,
// unload order) reversed, keeping those the tree holds (present: the
// names of ModuleDir's *.ko, without .ko). Left out, as upstream's loader
// leaves them: drv_seclib_host when the kernel has ksecurec (deal_ko.sh
// driver_auto_insmod: "ksecurec is exist, no need insmod
// drv_seclib_host"), and npu_peermem, which upstream never loads itself
// (modprobe_host_kos skips it). A module the tree holds that the list
// does not name is not loaded: the list is the normal mode's whole set
// (deal_ko.sh driver_ko_install removes the others in a virtualised
// install). drv_pcie_host or drv_vpcie must be among them: without one
// no chip comes up.
func LoadOrder(listed, present []string, ksecurec bool) ([]Module, error) {
	var out []Module
	for _, name := range slices.Backward(listed) {
		switch {
		case !slices.Contains(present, name),
			name == "npu_peermem",
			name == "drv_seclib_host" && ksecurec:
			continue
		}
		out = append(out, Module{Name: name, Optional: slices.Contains(optional, name)})
	}
	if !slices.ContainsFunc(out, func(m Module) bool { return m.Name == "drv_pcie_host" || m.Name == "drv_vpcie" }) {
		return nil, fmt.Errorf("neither drv_pcie_host.ko nor drv_vpcie.ko is both in %s/ and in %s's %s: the tree holds no host driver module", ModuleDir, SpecificFunc, ModuleListVar)
	}
	return out, nil
}
