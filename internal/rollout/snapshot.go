package rollout

import (
	"time"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// Snapshot is everything Decide needs, taken at one moment.
type Snapshot struct {
	Nodes []NodeView
	// Targets are the re-roll targets that exist; Missing names those that
	// do not (reported, never fatal).
	Targets []string
	Missing []string
	// Busy nodes have something running in this process (an eviction or
	// drain, a write on its way), named by the value; they get no action
	// until it ends.
	Busy map[string]string
	// NoDriver is true when no driver DaemonSet is managed (driver
	// disabled): there is nothing to roll.
	NoDriver bool
	// Returned is the last node this process saw come back from its
	// upgrade (the settling delay counts from it); ObservedSince is when
	// the running rollout started watching, zero for a one-off decision
	// (status, plan).
	Returned      Return
	ObservedSince time.Time
}

// NodeView is one NPU node as the rollout sees it.
type NodeView struct {
	Name            string
	ResourceVersion string
	// State is the parsed state label; RawState is kept to report a value
	// this version does not know.
	State         contract.UpgradeState
	RawState      string
	StateKnown    bool
	Skip          bool
	Canary        bool
	Unschedulable bool
	Ready         bool
	BootID        string

	// Profile is the driver DaemonSet covering the node ("" if none);
	// ProfileError says why there is none or why it is ambiguous.
	Profile      string
	ProfileError string
	Desired      string
	Loaded       string
	// Installed is the driver pod's installed-driver-version: the
	// version on disk, which the next boot loads ("" when no driver pod
	// records it).
	Installed string
	// InstallStatus is the driver pod's install-status: an install
	// over the loaded driver or a repair, and what it waits for.
	InstallStatus string
	// Injection is the NRI injector's injection-status: why workloads
	// cannot get the driver's user space here ("" when they can).
	Injection   string
	DriverReady bool

	// Bookkeeping annotations.
	WasCordoned    *bool
	Since          time.Time
	UpgradeBootID  string
	Target         string
	RebootRequired bool
	RebootReason   string
	// RebootStarted is reboot-started-at, by the NPU node's clock: shown
	// to humans, never compared with the rollout's time.
	RebootStarted time.Time
	// RebootFrom is reboot-from-boot-id: the boot the rebooter started
	// rebooting, "" when no reboot is in flight.
	RebootFrom string
	// RebootHold is the rollout's hold on the upgrade reboot (a
	// maintenance window), "" when none.
	RebootHold string
	// StateSeen and RebootSeen are when this process first saw the node
	// in its current state and its current reboot started, on its own
	// clock (zero: not observed, read as now). Timeouts count from these
	// (observe.go).
	StateSeen  time.Time
	RebootSeen time.Time
	Approved   bool
	// ApprovalValue is the approve-reboot annotation as written: any
	// value but "true" is no approval, and the notes say so.
	ApprovalValue string
	FailureReason string
	FailureStep   string
	// Rerolled maps the UID of each pod deleted for the re-roll to its
	// target, so a restarted rollout neither deletes twice nor takes an old
	// pod for the new one.
	Rerolled map[string]string

	// Pods on the node.
	NPUPods  int
	WaitPods int
	// WaitPodNames are the first waitForCompletion pods (namespace/name),
	// for the note that names what the node waits for.
	WaitPodNames []string
	Driver       *DriverPod
	// TargetPods maps a re-roll target to its pods on this node.
	TargetPods map[string][]TargetPod

	// RebootedFrom is the rebooter's rebooted-from-boot-id: the boot its
	// last completed reboot left (rebootrequest.go).
	RebootedFrom string
	// Cordon is who holds the node's cordon (cordon.go).
	Cordon contract.CordonOwners
}

// DriverPod is the node's pod of its profile's driver DaemonSet.
type DriverPod struct {
	Name    string
	Version string // the pod template's driver-version annotation
	Ready   bool
	ReadyAt time.Time
}

// TargetPod is a pod of a re-roll target DaemonSet on the node.
type TargetPod struct {
	Target               string
	Namespace, Name, UID string
	// Started is when the pod's containers last started (zero while
	// none runs, e.g. held by the driver gate in its init container).
	Started     time.Time
	Ready       bool
	Terminating bool
}

// OutOfDate is true when the node's profile wants a driver other than the
// one loaded, or than the one on disk (a version installed over the
// loaded one before a rollback: the next boot would load it). A node
// whose loaded version is unknown yet (driver pod not reported) is not out
// of date: nothing is started on a guess.
func (n NodeView) OutOfDate() bool {
	return n.Desired != "" && n.Loaded != "" && (n.Loaded != n.Desired || n.Installed != "" && n.Installed != n.Desired)
}

// UpToDate is true when the desired version is loaded and, where the
// driver pod records it, on disk.
func (n NodeView) UpToDate() bool {
	return n.Desired != "" && n.Loaded == n.Desired && (n.Installed == "" || n.Installed == n.Desired)
}

// Unavailable counts toward maxUnavailable: cordoned, NotReady, or being
// upgraded.
func (n NodeView) Unavailable() bool {
	return n.Unschedulable || !n.Ready || n.State.InProgress()
}
