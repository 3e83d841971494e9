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

// Chips is ChipsFile: the node's NPUs as the test bed sets them, read by
// the stand-in npu-smi. The product never reads it.
type Chips struct {
	// Model is the NPU model: "910B", "310P" or "A3".
	Model string `json:"model"`
	// Chips are the chips, IDs 0..n-1.
	Chips []Chip `json:"chips"`
	// StickyWedge keeps a chip's health across reboots (a fault a reboot
	// does not fix); otherwise a reboot makes every chip OK again, as the
	// simulated host (internal/host/simhost) models it.
	StickyWedge bool `json:"stickyWedge,omitempty"`
}

// Chip is one NPU.
type Chip struct {
	ID int `json:"id"`
	// Health is npu-smi's Health column: OK, Warning, Alarm or Critical.
	Health string `json:"health"`
}
