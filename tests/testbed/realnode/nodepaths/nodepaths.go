// Package nodepaths names the paths inside a real test-bed node that the
// node's own programs (realnode's init and runc wrapper) and the test bed
// agree on.
package nodepaths

const (
	// BinDir holds the node's kubelet, containerd, shim, runc and crictl
	// (a read-only bind of the test bed's build).
	BinDir = "/opt/npu-stack-node/bin"
	// Runc is the real runc.
	Runc = BinDir + "/runc"
	// TestbedDir holds the test bed's own programs in the node
	// (read-only): the runc wrapper containerd runs instead of runc.
	TestbedDir = "/opt/npu-stack-node/testbed"
	// RuncWrapper is realnode/runcwrap, containerd's runc binary.
	RuncWrapper = TestbedDir + "/runc"
	// ControlDir is the test bed's control directory on the node's disk:
	// chips.json and the boot ID. No product reads it.
	ControlDir = "/var/lib/npu-stack-testbed"
	// BootIDFile holds the node's current boot ID, bound over
	// /proc/sys/kernel/random/boot_id in the node and in every container.
	BootIDFile = ControlDir + "/boot_id"
	// ChipsFile describes the node's chips for the stand-in npu-smi.
	ChipsFile = ControlDir + "/chips.json"
	// BootIDHook is the runc wrapper's argument that makes it the OCI
	// createContainer hook binding BootIDFile into a container.
	BootIDHook = "boot-id-hook"
)

// DevChipsFile is the copy of ChipsFile beside the device nodes: a
// container sees the node's /dev (the chart mounts it into the device
// plugin) but not its /var, and the stand-in libdcmi.so, which stands for
// the kernel driver behind /dev/davinci_manager, reads it there
// (tests/testbed/standin). /dev is new at every boot; the boot writes it.
const DevChipsFile = "/dev/.npu-stack-testbed/chips.json"

// Chips is ChipsFile: the node's NPUs as the test bed sets them, read by
// the stand-in npu-smi and libdcmi.so (tests/testbed/standin, whose Chips
// has the same JSON). The product never reads it.
type Chips struct {
	// Model is the NPU model: "910B", "310P" or "A3".
	Model string `json:"model"`
	// Name, ChipsPerCard and DCMIInit are the stand-in driver's (npu-smi's
	// chip name, chips per card, dcmi_init()'s code); kept as set.
	Name         string `json:"name,omitempty"`
	ChipsPerCard int    `json:"chipsPerCard,omitempty"`
	DCMIInit     int    `json:"dcmiInit,omitempty"`
	// Chips are the chips; a chip's ID is its index.
	Chips []Chip `json:"chips"`
	// StickyWedge keeps a chip's health across reboots (a fault a reboot
	// does not fix); otherwise a reboot makes every chip OK again, as the
	// simulated host (internal/host/simhost) models it.
	StickyWedge bool `json:"stickyWedge,omitempty"`
}

// Chip is one NPU.
type Chip struct {
	// Health is npu-smi's Health column: OK, Warning, Alarm or Critical.
	Health string `json:"health"`
}

// SysrqGuards pairs the kernel's magic SysRq files (Linux
// Documentation/admin-guide/sysrq.rst) with the node's regular files
// bound over them, in the node and in its privileged containers, where the
// machine's kernel has them: a sysrq 'b' written on a node must not
// reboot the machine. The test machine's kernel has no SysRq, so there the
// guards are not needed and not mounted.
func SysrqGuards() [][2]string {
	return [][2]string{
		{"/proc/sysrq-trigger", ControlDir + "/sysrq-trigger"},
		{"/proc/sys/kernel/sysrq", ControlDir + "/sysrq"},
	}
}
