package contract

// LeftBehindMode is the chart's driver.upgradePolicy.nodesLeftBehind
// (npu-hooks rollout --nodes-left-behind): whether a rollout that finished
// without some nodes (NotReady, a recovery pending, skipped, no canary able
// to pass) exits non-zero.
type LeftBehindMode string

const (
	// LeftBehindFailIfOutOfDate fails only when a node left behind, not
	// skipped by the admin, still runs an out-of-date driver: a chart
	// change that leaves the driver alone succeeds whatever the fleet's
	// health.
	LeftBehindFailIfOutOfDate LeftBehindMode = "fail-if-out-of-date"
	// LeftBehindAlwaysSucceed never fails for nodes left behind.
	LeftBehindAlwaysSucceed LeftBehindMode = "always-succeed"
	// LeftBehindFail fails whenever a node is left behind.
	LeftBehindFail LeftBehindMode = "fail"
)

// LeftBehindModes lists the valid values, the default first.
var LeftBehindModes = []LeftBehindMode{LeftBehindFailIfOutOfDate, LeftBehindAlwaysSucceed, LeftBehindFail}

// Events of nodes the rollout leaves alone.
const (
	// EventUpgradeLeftBehind: the rollout finished without this node,
	// which it could not move (the message says why and the fix).
	EventUpgradeLeftBehind EventReason = "UpgradeLeftBehind"
	// EventUpgradeAbandoned: the node's upgrade lost its target (the
	// driver disabled, or the node's profile removed) and the node was
	// given back without a reboot.
	EventUpgradeAbandoned EventReason = "UpgradeAbandoned"
)
