package contract

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultDomain is the chart's default labelDomain.
const DefaultDomain = "npu.openfuyao.com"

// Keys spells the label and annotation names of the node contract under
// one domain (the chart's labelDomain), so that two installations with
// different domains never read each other's state.
type Keys struct{ Domain string }

// NewKeys validates domain (a DNS subdomain, as a label prefix must be).
func NewKeys(domain string) (Keys, error) {
	if errs := validation.IsDNS1123Subdomain(domain); len(errs) > 0 {
		return Keys{}, fmt.Errorf("label domain %q is not a DNS subdomain: %v; set labelDomain to something like %s", domain, errs, DefaultDomain)
	}
	return Keys{Domain: domain}, nil
}

func (k Keys) key(name string) string { return k.Domain + "/" + name }

// Labels.

// UpgradeState is the rollout state of a node; absent means up to date.
func (k Keys) UpgradeState() string { return k.key("driver-upgrade-state") }

// UpgradeSkip=true (set by the admin) keeps the rollout off a node.
func (k Keys) UpgradeSkip() string { return k.key("driver-upgrade.skip") }

// RebootRequired=true asks the node's rebooter for a reboot.
func (k Keys) RebootRequired() string { return k.key("reboot-required") }

// DriverVersion is the driver version loaded in the running kernel,
// written by the driver pod.
func (k Keys) DriverVersion() string { return k.key("driver-version") }

// DriverReady is true/false, written by the health-watch.
func (k Keys) DriverReady() string { return k.key("driver-ready") }

// Annotations.

// RebootReason is "upgrade" or "recovery" (see RebootReason).
func (k Keys) RebootReason() string { return k.key("reboot-reason") }

// ApproveReboot=true (set by the admin) authorises exactly one reboot.
func (k Keys) ApproveReboot() string { return k.key("approve-reboot") }

// Rollout bookkeeping (written by npu-hooks rollout).

// UpgradeBootID is the node's boot ID when the rollout asked for the reboot.
func (k Keys) UpgradeBootID() string { return k.key("driver-upgrade.boot-id") }

// UpgradeWasCordoned is "true" when the node was cordoned before the
// rollout cordoned it, so the rollout must not uncordon it.
func (k Keys) UpgradeWasCordoned() string { return k.key("driver-upgrade.was-cordoned") }

// UpgradeSince is when the node entered its current state (RFC 3339).
func (k Keys) UpgradeSince() string { return k.key("driver-upgrade.since") }

// UpgradeTarget is the driver version the node is being moved to.
func (k Keys) UpgradeTarget() string { return k.key("driver-upgrade.target-version") }

// InstalledDriver is the driver version installed on the node's disk,
// the one its next boot loads, written by the driver pod. It differs from
// the driver-version label (the loaded driver) between the driver pod's
// install of a new version, done on the drained node in reboot-required,
// and the reboot that loads it; the rebooter does not reboot a node in
// reboot-required before it names the upgrade's target.
func (k Keys) InstalledDriver() string { return k.key("installed-driver-version") }

// InstallStatus is the driver pod's one-line account of an install
// over the loaded driver or a repair: installing, blocked (by whom),
// failed (why, and the next try), installed (waiting for the reboot).
// Removed once the driver is ready after the boot. npu-hooks status
// shows it.
func (k Keys) InstallStatus() string { return k.key("driver-upgrade.install-status") }

// InstalledIncomplete is the installed-driver-version while an install
// runs or after one that did not finish: no version is on the disk whole,
// so neither the rebooter (waiting for the target) nor the rollout
// (counting nodes done) takes the node for installed.
const InstalledIncomplete = "incomplete"

// DriverRetryCommand is the one command that makes the driver pod of node
// try its install again at once: its replacement starts with no backoff.
// The driver DaemonSets' pods carry app=npu-driver-daemonset, the label
// the Alauda NPU Operator documentation selects them by (docs/host-contract.md,
// ANO-UPG).
func DriverRetryCommand(namespace, node string) string {
	if namespace == "" {
		namespace = "<namespace>"
	}
	return fmt.Sprintf("kubectl delete pod -n %s -l app=npu-driver-daemonset --field-selector spec.nodeName=%s", namespace, node)
}

// InjectionStatus is the NRI injector's account of why this node's
// workloads cannot get the driver's user space (cdi.inject): the runtime
// offers no NRI, and the reason. Absent when the injector is registered
// or injection is off. npu-hooks status shows it.
func (k Keys) InjectionStatus() string { return k.key("injection-status") }

// UpgradeFailureReason and UpgradeFailureStep explain upgrade-failed.
func (k Keys) UpgradeFailureReason() string { return k.key("driver-upgrade.failure-reason") }
func (k Keys) UpgradeFailureStep() string   { return k.key("driver-upgrade.failure-step") }

// UpgradeRerolled lists the UIDs of the pods the rollout deleted to re-roll
// them on this node, so a restarted rollout neither deletes twice nor
// mistakes an old pod for the new one.
func (k Keys) UpgradeRerolled() string { return k.key("driver-upgrade.rerolled-pods") }

// Rebooter bookkeeping (written by npu-rebooter).

// RebootFromBootID is the boot ID recorded right before the rebooter
// issued a reboot; a different boot ID afterwards means the reboot happened.
func (k Keys) RebootFromBootID() string { return k.key("driver-upgrade.reboot-from-boot-id") }

// RebootStartedAt is when the rebooter issued the reboot (RFC 3339); the
// rollout's reboot timeout counts from here, not from the wait for approval.
func (k Keys) RebootStartedAt() string { return k.key("driver-upgrade.reboot-started-at") }

// RebootHistory holds the node's recent reboot times (comma-separated
// RFC 3339), the persisted reboot budget. An admin removes it to reset the
// loop guard.
func (k Keys) RebootHistory() string { return k.key("driver-upgrade.reboot-history") }

// RecoveryWasCordoned is "true" when the node was already cordoned before
// a recovery reboot cordoned it.
func (k Keys) RecoveryWasCordoned() string { return k.key("driver-upgrade.recovery-was-cordoned") }

// RecoveryCordoned is "true" while a recovery holds the node cordoned.
func (k Keys) RecoveryCordoned() string { return k.key("driver-upgrade.recovery-cordoned") }

// DriverSpecVersion is the annotation the chart puts on the driver
// DaemonSet and its pod template: the desired driver version.
func (k Keys) DriverSpecVersion() string { return k.key("driver-version") }

// RebootStartedReason is the reason (upgrade or recovery) of the reboot
// recorded in RebootFromBootID, kept by the rebooter because the
// requester may clear reboot-reason after the boot before the rebooter
// completes the reboot.
func (k Keys) RebootStartedReason() string { return k.key("driver-upgrade.reboot-started-reason") }

// RebootedFromBootID is the boot ID the node's last completed reboot
// left, written by the rebooter when it clears the reboot marker after
// the boot. It tells the rollout that the reboot it asked for happened
// even while the kubelet still reports the old boot ID in the Node's
// status: the rollout then waits for the kubelet instead of asking again.
func (k Keys) RebootedFromBootID() string { return k.key("driver-upgrade.rebooted-from-boot-id") }

// UninstallRequested is the annotation `npu-hooks uninstall` puts on a
// driver DaemonSet right before it deletes it (foreground, so the
// DaemonSet stays, marked deleted, until its pods are gone). A driver pod
// that stops while its DaemonSet is being deleted with this annotation
// removes npu-stack's files from its host; any other stop (a rolling
// update, a profile renamed) removes nothing. Its value names the request,
// repeated in the pod's HostFilesRemoved Event.
func (k Keys) UninstallRequested() string { return k.key("uninstall-requested") }
