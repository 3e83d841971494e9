package contract

// UpgradeState is a value of the driver-upgrade-state label
// (docs/driver-upgrade.md, "What happens on each node");
// names follow NVIDIA's upgrade controller where one exists.
type UpgradeState string

const (
	// StateDone is the absence of the label: the node is up to date.
	StateDone                UpgradeState = ""
	StateUpgradeRequired     UpgradeState = "upgrade-required"
	StateCordonRequired      UpgradeState = "cordon-required"
	StateWaitForJobsRequired UpgradeState = "wait-for-jobs-required"
	StatePodDeletionRequired UpgradeState = "pod-deletion-required"
	StateDrainRequired       UpgradeState = "drain-required"
	StateRebootRequired      UpgradeState = "reboot-required"
	StateValidationRequired  UpgradeState = "validation-required"
	StateUncordonRequired    UpgradeState = "uncordon-required"
	StateFailed              UpgradeState = "upgrade-failed"
)

// States lists every labelled state in rollout order (failed last).
var States = []UpgradeState{
	StateUpgradeRequired, StateCordonRequired, StateWaitForJobsRequired,
	StatePodDeletionRequired, StateDrainRequired, StateRebootRequired,
	StateValidationRequired, StateUncordonRequired, StateFailed,
}

// ParseUpgradeState reads a label value; ok is false for an unknown value.
func ParseUpgradeState(s string) (UpgradeState, bool) {
	if s == "" {
		return StateDone, true
	}
	for _, st := range States {
		if string(st) == s {
			return st, true
		}
	}
	return "", false
}

// InProgress is true for the states between start and done, in which the
// node counts against maxParallelUpgrades.
func (s UpgradeState) InProgress() bool {
	switch s {
	case StateDone, StateUpgradeRequired, StateFailed:
		return false
	}
	return true
}

// RebootReason is the value of the reboot-reason annotation and appears
// as reason=<value> in the RebootRequired event.
type RebootReason string

const (
	ReasonUpgrade  RebootReason = "upgrade"
	ReasonRecovery RebootReason = "recovery"
)

// EventReason is the reason of an Event on a Node.
type EventReason string

const (
	EventRebootRequired   EventReason = "RebootRequired"
	EventRebootCompleted  EventReason = "RebootCompleted"
	EventRebootRefused    EventReason = "RebootRefused"
	EventRebootFailed     EventReason = "RebootFailed"
	EventRecoveryPaused   EventReason = "RecoveryPaused"
	EventNPUDriverUpgrade EventReason = "NPUDriverUpgrade"
	EventUpgradeFailed    EventReason = "UpgradeFailed"
	EventChipWedged       EventReason = "ChipWedged"
	EventChipRecovered    EventReason = "ChipRecovered"
	// EventNPUHostProblem: npu-smi could not run (missing, unable to load
	// its libraries, no driver on this boot): the host breaks its
	// contract; no wedge, no reboot.
	EventNPUHostProblem EventReason = "NPUHostProblem"
	// EventDevicePluginWithdrawn: the health-watch deleted the device
	// plugin pod of a wedged node, so its chips leave the scheduler.
	EventDevicePluginWithdrawn EventReason = "DevicePluginWithdrawn"
	// Events of the driver pod's entry gate (npu-healthwatch driver-entry).
	EventDriverLoaded            EventReason = "DriverLoaded"
	EventDriverActivationPending EventReason = "DriverActivationPending"
	EventDriverInstallFailed     EventReason = "DriverInstallFailed"
	// EventDriverInstallBlocked: a process still holds a davinci device
	// node after the driver pod stopped ours; the install waits for it.
	EventDriverInstallBlocked EventReason = "DriverInstallBlocked"
	// EventDriverInstallRepair: the driver pod found a half-installed
	// driver and installs it again before anything else.
	EventDriverInstallRepair EventReason = "DriverInstallRepair"
	// EventNPUPodsStopped: the driver pod deleted the pods of ours that
	// hold the chips (device plugin, exporter, re-roll targets) before an
	// install over the loaded driver.
	EventNPUPodsStopped EventReason = "NPUPodsStopped"
	// EventHealthProbesPaused: the health-watch stopped probing while the
	// chips are held for an install; they resume after the reboot.
	EventHealthProbesPaused EventReason = "HealthProbesPaused"
	// EventNRIUnavailable: the node's container runtime offers no NRI, so
	// the injector cannot give workloads the driver's user space and the
	// node advertises no chip (cdi.inject).
	EventNRIUnavailable EventReason = "NRIUnavailable"
	// EventHostFilesRemoved: the driver pod, stopped by npu-hooks
	// uninstall, removed npu-stack's files from its host (the message
	// names them and the request).
	EventHostFilesRemoved EventReason = "HostFilesRemoved"
)

// Values of boolean labels and annotations.
const (
	True  = "true"
	False = "false"
)

// MarkerFile is the name of the driver-ready marker in the marker
// directory (driver.markerDir, /run/npu-stack by default). It holds the
// loaded driver version; /run is emptied by every reboot.
const MarkerFile = "driver-ready"

// RerollTargetApps are the app.kubernetes.io/component values of the
// chart's DaemonSets re-rolled after a driver change.
const (
	ComponentDevicePlugin = "device-plugin"
	ComponentExporter     = "exporter"
	ComponentDriver       = "driver"
)

// Progress events of the rebooter.
const (
	// EventRebootPending says what a pending reboot waits for (approval,
	// uptime guard, a slot), so `kubectl describe node` answers "why not yet?".
	EventRebootPending EventReason = "RebootPending"
	// EventRebooting is emitted right before the reboot command.
	EventRebooting EventReason = "Rebooting"
	// EventRecoveryDrainTimedOut: a recovery drain ran out of time with NPU
	// pods still terminating (stuck on the wedged chip); the message names
	// them, and the reboot goes ahead.
	EventRecoveryDrainTimedOut EventReason = "RecoveryDrainTimedOut"
	// EventEvictionBlocked: the API server refused an eviction (a
	// PodDisruptionBudget); the message names the pod and the budget.
	EventEvictionBlocked EventReason = "EvictionBlocked"
	// EventApprovalInvalid: approve-reboot has a value other than "true",
	// which is no approval.
	EventApprovalInvalid EventReason = "ApprovalInvalid"
)
