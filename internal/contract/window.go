package contract

// Maintenance windows (driver.upgradePolicy.maintenanceWindows,
// recoveryPolicy.maintenanceWindows). Each kind of window has one judge,
// on one clock: the rollout for upgrades (it admits nodes and holds their
// reboots), the node's rebooter for automatic recoveries.

// EventMaintenanceWindowClosed: a node waits for its maintenance window
// to open. The message names the node, what waits (its admission to the
// upgrade, its upgrade reboot, or its recovery reboot) and until when, on
// the window's clock, with the approval that lets it through now.
const EventMaintenanceWindowClosed EventReason = "MaintenanceWindowClosed"

// HoldMaintenanceWindow is the value of RebootHold set while an upgrade
// reboot waits for the window (inFlight: wait).
const HoldMaintenanceWindow = "maintenance-window"

// RebootHold, written by the rollout on a node in reboot-required whose
// upgrade reboot must wait (for now, only for a maintenance window that
// closed with inFlight: wait): the rebooter does not start an upgrade
// reboot while it is set, unless the node is approved. The driver pod
// installs the new version meanwhile (the request stays), so the reboot
// can start the moment the rollout lifts the hold. The rollout removes
// it when the window opens and when the node leaves reboot-required.
func (k Keys) RebootHold() string { return k.key("driver-upgrade.reboot-hold") }
