package realnode

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/openfuyao/npu-stack/tests/testbed/realnode/nodepaths"
)

// The driver as the node's host root shows it (docs/host-contract.md,
// section 1; the same facts as internal/host/simhost): the modules whose
// presence in /sys/module proves a loaded driver, and the device nodes a
// loaded driver has besides one /dev/davinci<N> per chip (hicann/driver
// v8.5.0, scripts/package/custom/driver/ascend910B/scripts/host_sys_init.sh
// g_change_mode_dev_list).
var (
	driverProofModules = []string{"drv_pcie_host", "drv_vpcie"}
	controlDevices     = []string{"davinci_manager", "devmm_svm", "hisi_hdc"}
)

// chipModels maps the test bed's chip labels and npu-smi's model names to
// the model chips.json holds.
var chipModels = map[string]string{"910b": "910B", "910B": "910B", "310p": "310P", "310P": "310P", "a3": "A3", "A3": "A3"}

// newChips is the chips.json of a node with count chips of model chip,
// all healthy; no chips for an empty model.
func newChips(chip string, count int) (nodepaths.Chips, error) {
	if chip == "" {
		return nodepaths.Chips{}, nil
	}
	model, ok := chipModels[chip]
	if !ok {
		return nodepaths.Chips{}, fmt.Errorf("chip model %q: want 910B, 310P or A3", chip)
	}
	if count <= 0 {
		return nodepaths.Chips{}, fmt.Errorf("chip model %s with %d chips: want at least one", model, count)
	}
	c := nodepaths.Chips{Model: model}
	for range count {
		c.Chips = append(c.Chips, nodepaths.Chip{Health: "OK"})
	}
	return c, nil
}

// controlPath is a file of the test bed's control directory on the
// node's disk (its /var), reachable whether or not the node runs.
func (n *Node) controlPath(nodePath string) string {
	return filepath.Join(n.cfg.Dir, dirVar, strings.TrimPrefix(nodePath, "/var/"))
}

// Chips reads the node's chips.json.
func (n *Node) Chips() (nodepaths.Chips, error) {
	var c nodepaths.Chips
	b, err := os.ReadFile(n.controlPath(nodepaths.ChipsFile))
	if err != nil {
		return c, fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("node %s: %s: %w", n.cfg.Name, nodepaths.ChipsFile, err)
	}
	return c, nil
}

// SetChipHealth sets chip's health in chips.json ("Critical" wedges it
// for the stand-in npu-smi).
func (n *Node) SetChipHealth(chip int, health string) error {
	c, err := n.Chips()
	if err != nil {
		return err
	}
	if chip < 0 || chip >= len(c.Chips) {
		return fmt.Errorf("node %s: no chip %d (has %d)", n.cfg.Name, chip, len(c.Chips))
	}
	c.Chips[chip].Health = health
	return n.writeChips(c)
}

// writeChips replaces chips.json whole (write and rename: the stand-in
// npu-smi may read it at any moment), and its copy in /dev while the
// node runs with the driver loaded (its device nodes there).
func (n *Node) writeChips(c nodepaths.Chips) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("node %s: chips.json: %w", n.cfg.Name, err)
	}
	paths := []string{n.controlPath(nodepaths.ChipsFile)}
	if n.pid.Load() != 0 {
		if _, err := os.Stat(n.Path("/dev/" + controlDevices[0])); err == nil {
			paths = append(paths, n.Path(nodepaths.DevChipsFile))
		}
	}
	for _, p := range paths {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("node %s: %w", n.cfg.Name, err)
		}
		if err := os.WriteFile(p+".new", append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("node %s: %w", n.cfg.Name, err)
		}
		if err := os.Rename(p+".new", p); err != nil {
			return fmt.Errorf("node %s: %w", n.cfg.Name, err)
		}
	}
	return nil
}

// healChips is a reboot's effect on the chips: every chip OK again,
// unless the fault is sticky.
func (n *Node) healChips() error {
	c, err := n.Chips()
	if err != nil || c.StickyWedge {
		return err
	}
	for i := range c.Chips {
		c.Chips[i].Health = "OK"
	}
	return n.writeChips(c)
}

// newBootID writes a new random boot ID (the kernel's format: a version 4
// UUID and a newline, Linux drivers/char/random.c proc_do_uuid) to the
// file that is bound over /proc/sys/kernel/random/boot_id. It is written
// in place: the bind mounts of a running node stay valid.
func (n *Node) newBootID() error {
	u := make([]byte, 16)
	if _, err := rand.Read(u); err != nil {
		return fmt.Errorf("node %s: boot ID: %w", n.cfg.Name, err)
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	id := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
	if err := os.WriteFile(n.controlPath(nodepaths.BootIDFile), []byte(id+"\n"), 0o444); err != nil {
		return fmt.Errorf("node %s: boot ID: %w", n.cfg.Name, err)
	}
	n.hist.Lock()
	n.bootIDs = append(n.bootIDs, id)
	n.hist.Unlock()
	return nil
}

// kernelRelease is `uname -r` of the machine: a node runs the machine's
// kernel, so this is what the kubelet reports as its kernelVersion and
// what an installer's `uname -r` finds.
func kernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// MachineKernel is `uname -r` of this machine, the kernel every real node
// runs.
func MachineKernel() (string, error) { return kernelRelease() }

// KernelRelease is the kernel the node runs (`uname -r`).
func (n *Node) KernelRelease() string { return n.kernel }

// ModulesDir is where the driver installer puts its modules:
// /lib/modules/$(uname -r)/updates (docs/host-contract.md, section 2).
func (n *Node) ModulesDir() string { return "/lib/modules/" + n.kernel + "/updates" }

// loadDriver is what a boot does with the driver on disk: every module
// under ModulesDir is loaded (a directory in /sys/module, named as the
// kernel names modules: the file name without .ko, '-' as '_'), and, if
// the driver's host module is among them, its device nodes appear.
// They are real character devices with /dev/null's numbers, since no
// Ascend kernel driver exists here, mode 0666 as the installer's
// --install-for-all leaves them (host-contract section 2).
func (n *Node) loadDriver() error {
	files, err := os.ReadDir(n.Path(n.ModulesDir()))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	var loaded []string
	for _, f := range files {
		if name, ok := strings.CutSuffix(f.Name(), ".ko"); ok && !f.IsDir() {
			name = strings.ReplaceAll(name, "-", "_")
			if err := os.MkdirAll(n.Path("/sys/module/"+name), 0o755); err != nil {
				return fmt.Errorf("node %s: load module %s: %w", n.cfg.Name, name, err)
			}
			loaded = append(loaded, name)
		}
	}
	if !slices.ContainsFunc(driverProofModules, func(m string) bool { return slices.Contains(loaded, m) }) {
		return nil
	}
	return n.createDevices()
}

// createDevices makes the driver's device nodes in the node's /dev.
func (n *Node) createDevices() error {
	c, err := n.Chips()
	if err != nil {
		return err
	}
	names := slices.Clone(controlDevices)
	for i := range c.Chips {
		names = append(names, fmt.Sprintf("davinci%d", i))
	}
	var null unix.Stat_t
	if err := unix.Stat("/dev/null", &null); err != nil {
		return fmt.Errorf("node %s: /dev/null: %w", n.cfg.Name, err)
	}
	for _, name := range names {
		p := n.Path("/dev/" + name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(null.Rdev)); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("node %s: mknod /dev/%s: %w", n.cfg.Name, name, err)
		}
		if err := os.Chmod(p, 0o666); err != nil { // mknod's mode is under the umask
			return fmt.Errorf("node %s: %w", n.cfg.Name, err)
		}
	}
	return n.writeChips(c) // and the copy beside the device nodes
}

// LoadedModules lists the node's /sys/module.
func (n *Node) LoadedModules() ([]string, error) {
	entries, err := os.ReadDir(n.Path("/sys/module"))
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}
