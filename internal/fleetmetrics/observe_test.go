package fleetmetrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/rollout"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func view(name string, mod func(*rollout.NodeView)) rollout.NodeView {
	n := rollout.NodeView{Name: name, Loaded: "25.3.0", Desired: "25.5.0", DriverReady: true, StateKnown: true}
	if mod != nil {
		mod(&n)
	}
	return n
}

func TestNodeState(t *testing.T) {
	for _, tc := range []struct {
		n    rollout.NodeView
		want string
	}{
		{view("a", func(n *rollout.NodeView) { n.Loaded = "25.5.0" }), StateUpToDate},
		{view("b", nil), StateOutOfDate},
		{view("c", func(n *rollout.NodeView) { n.Loaded = "" }), StateUnknown},
		{view("d", func(n *rollout.NodeView) { n.Desired = "" }), StateUnknown},
		{view("e", func(n *rollout.NodeView) { n.RawState, n.State = "drain-required", contract.StateDrainRequired }), "drain-required"},
		// A version on disk other than the desired one: the next boot
		// would load it, so the node is out of date.
		{view("f", func(n *rollout.NodeView) { n.Loaded, n.Installed = "25.5.0", "25.3.0" }), StateOutOfDate},
	} {
		if got := NodeState(tc.n); got != tc.want {
			t.Errorf("%s: state %q, want %q", tc.n.Name, got, tc.want)
		}
	}
}

func TestAwaitingApprovalAndPlannedReboot(t *testing.T) {
	wants := func(reason string, mod func(*rollout.NodeView)) rollout.NodeView {
		return view("n", func(n *rollout.NodeView) {
			n.RebootRequired, n.RebootReason = true, reason
			if mod != nil {
				mod(n)
			}
		})
	}
	manual, auto := Policy{PlannedRebootTimeout: 30 * time.Minute}, Policy{AutoUpgrade: true, AutoRecover: true, PlannedRebootTimeout: 30 * time.Minute}
	for _, tc := range []struct {
		name              string
		n                 rollout.NodeView
		p                 Policy
		awaiting, planned bool
	}{
		{"no reboot wanted", view("n", nil), manual, false, false},
		{"upgrade, manual, unapproved", wants("upgrade", nil), manual, true, false},
		{"upgrade, manual, approved", wants("upgrade", func(n *rollout.NodeView) { n.Approved = true }), manual, false, true},
		{"upgrade, automatic", wants("upgrade", nil), auto, false, true},
		{"recovery, manual", wants("recovery", nil), manual, true, false},
		{"recovery, automatic", wants("recovery", nil), auto, false, true},
		{"an unknown reason needs approval", wants("", nil), auto, true, false},
		{"an approval other than true is none", wants("upgrade", func(n *rollout.NodeView) { n.ApprovalValue = "yes" }), manual, true, false},
		{"started: planned, no longer awaiting", wants("upgrade", func(n *rollout.NodeView) {
			n.RebootFrom, n.RebootStarted = "boot-1", t0.Add(-10*time.Minute)
		}), manual, false, true},
		{"started past the reboot timeout: down, not planned", wants("upgrade", func(n *rollout.NodeView) {
			n.RebootFrom, n.RebootStarted = "boot-1", t0.Add(-31*time.Minute)
		}), manual, false, false},
		{"started, reboot-required already cleared", view("n", func(n *rollout.NodeView) {
			n.RebootFrom, n.RebootStarted, n.RebootReason = "boot-1", t0.Add(-time.Minute), "recovery"
		}), manual, false, true},
	} {
		if got := AwaitingApproval(tc.n, tc.p); got != tc.awaiting {
			t.Errorf("%s: awaiting approval %v, want %v", tc.name, got, tc.awaiting)
		}
		if got := PlannedReboot(tc.n, tc.p, t0); got != tc.planned {
			t.Errorf("%s: planned reboot %v, want %v", tc.name, got, tc.planned)
		}
	}
}

func TestCollectorServesTheFleet(t *testing.T) {
	nodes := []rollout.NodeView{
		view("npu-0", func(n *rollout.NodeView) {
			n.RawState, n.State, n.Since = "reboot-required", contract.StateRebootRequired, t0.Add(-5*time.Minute)
			n.RebootRequired, n.RebootReason, n.InstallStatus = true, "upgrade", "installed 25.5.0"
		}),
		view("npu-1", func(n *rollout.NodeView) { n.Loaded = "25.5.0" }),
		view("npu-2", func(n *rollout.NodeView) {
			n.RawState, n.State, n.FailureStep, n.DriverReady = "upgrade-failed", contract.StateFailed, "drain", false
			n.InstallStatus = "failed: installer exited 1; next try in 30s"
		}),
		view("npu-3", func(n *rollout.NodeView) { n.Loaded = "" }),
	}
	jobs := []Job{
		{Name: "npu-stack-rollout-resume-1", Kind: "rollout-resume", Created: t0.Add(-time.Hour), Status: JobFailed},
		{Name: "npu-stack-rollout", Kind: "rollout", Created: t0.Add(-10 * time.Minute), Status: JobActive},
	}
	records := []Record{{Name: "npu-stack-rollout-25.5.0", Last: t0.Add(-time.Minute), Entries: 7}}
	c := NewCollector(func() (Inputs, error) { return Inputs{Nodes: nodes, Jobs: jobs, Records: records}, nil },
		Policy{PlannedRebootTimeout: time.Hour}, func() time.Time { return t0 })
	want := `
# HELP npu_fleet_nodes NPU nodes per driver upgrade state: the driver-upgrade-state label, else up-to-date, out-of-date (queued or left behind) or unknown (no version reported, no profile).
# TYPE npu_fleet_nodes gauge
npu_fleet_nodes{state="cordon-required"} 0
npu_fleet_nodes{state="drain-required"} 0
npu_fleet_nodes{state="out-of-date"} 0
npu_fleet_nodes{state="pod-deletion-required"} 0
npu_fleet_nodes{state="reboot-required"} 1
npu_fleet_nodes{state="uncordon-required"} 0
npu_fleet_nodes{state="unknown"} 1
npu_fleet_nodes{state="up-to-date"} 1
npu_fleet_nodes{state="upgrade-failed"} 1
npu_fleet_nodes{state="upgrade-required"} 0
npu_fleet_nodes{state="validation-required"} 0
npu_fleet_nodes{state="wait-for-jobs-required"} 0
# HELP npu_fleet_node_awaiting_approval 1 while the node's wanted reboot waits for an approve-reboot annotation.
# TYPE npu_fleet_node_awaiting_approval gauge
npu_fleet_node_awaiting_approval{node="npu-0",reason="upgrade"} 1
# HELP npu_fleet_nodes_awaiting_approval NPU nodes whose wanted reboot waits for an approve-reboot annotation, by reason.
# TYPE npu_fleet_nodes_awaiting_approval gauge
npu_fleet_nodes_awaiting_approval{reason="recovery"} 0
npu_fleet_nodes_awaiting_approval{reason="upgrade"} 1
# HELP npu_fleet_driver_version_nodes NPU nodes per driver version loaded in the running kernel (driver-version label; none = not reported).
# TYPE npu_fleet_driver_version_nodes gauge
npu_fleet_driver_version_nodes{version="25.3.0"} 2
npu_fleet_driver_version_nodes{version="25.5.0"} 1
npu_fleet_driver_version_nodes{version="none"} 1
# HELP npu_fleet_node_upgrade_state_since_timestamp_seconds When the node entered its upgrade state (driver-upgrade.since), Unix seconds.
# TYPE npu_fleet_node_upgrade_state_since_timestamp_seconds gauge
npu_fleet_node_upgrade_state_since_timestamp_seconds{node="npu-0",state="reboot-required"} 1.77236610e+09
# HELP npu_fleet_node_upgrade_failed 1 while the node is upgrade-failed, with the step that failed.
# TYPE npu_fleet_node_upgrade_failed gauge
npu_fleet_node_upgrade_failed{node="npu-2",step="drain"} 1
# HELP npu_fleet_node_driver_install_status 1 for the driver pod's install over a loaded driver (install-status annotation: stopping, installing, blocked, failed, installed).
# TYPE npu_fleet_node_driver_install_status gauge
npu_fleet_node_driver_install_status{node="npu-0",status="installed"} 1
npu_fleet_node_driver_install_status{node="npu-2",status="failed"} 1
# HELP npu_fleet_node_planned_reboot 1 while npu-stack reboots the node on purpose (authorised, or started and not past the reboot timeout): the inhibition source for node-down alerts.
# TYPE npu_fleet_node_planned_reboot gauge
# HELP npu_fleet_rollout_latest_job 1 for the newest rollout Job, with its status (active, succeeded, failed).
# TYPE npu_fleet_rollout_latest_job gauge
npu_fleet_rollout_latest_job{job_name="npu-stack-rollout",kind="rollout",status="active"} 1
# HELP npu_fleet_rollout_outcome 1 per rollout record with the outcome of its last run (running, finished, paused, stuck, deadline).
# TYPE npu_fleet_rollout_outcome gauge
npu_fleet_rollout_outcome{outcome="running",rollout="npu-stack-rollout-25.5.0"} 1
# HELP npu_fleet_nodes_driver_not_ready NPU nodes whose driver-ready label is not true.
# TYPE npu_fleet_nodes_driver_not_ready gauge
npu_fleet_nodes_driver_not_ready 1
`
	names := []string{MetricNodes, MetricNodeAwaitingApproval, MetricNodesAwaitingApproval, MetricDriverVersionNodes, MetricNodeStateSince,
		MetricNodeUpgradeFailed, MetricNodeInstallStatus, MetricNodePlannedReboot, MetricRolloutLatestJob, MetricRolloutOutcome, MetricNodesDriverNotReady}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, MetricNodeDriver); n != len(nodes) {
		t.Errorf("%s: %d series, want one per node (%d)", MetricNodeDriver, n, len(nodes))
	}
}

func TestCollectorFailsTheScrapeOnAnUnreadableSource(t *testing.T) {
	errFake := errors.New("node cache not synced")
	c := NewCollector(func() (Inputs, error) { return Inputs{}, errFake }, Policy{}, time.Now)
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), errFake.Error()) {
		t.Fatalf("gather with an unreadable source: %v, want the source's error", err)
	}
}

func TestEveryObservedSeriesIsDeclared(t *testing.T) {
	declared := map[string]bool{}
	for _, d := range Metrics() {
		declared[d.Name] = true
	}
	nodes := []rollout.NodeView{view("a", func(n *rollout.NodeView) {
		n.RawState, n.State, n.Since, n.FailureStep, n.InstallStatus = "upgrade-failed", contract.StateFailed, t0, "drain", "blocked: pid 1"
		n.RebootRequired, n.RebootFrom, n.RebootStarted = true, "b", t0
	}), view("b", func(n *rollout.NodeView) { n.RebootRequired = true })}
	o := Observe(Inputs{Nodes: nodes, Jobs: []Job{{Name: "j"}}, Records: []Record{{Name: "r", Last: t0}}}, Policy{}, t0)
	for name := range o {
		if !declared[name] {
			t.Errorf("series %s is observed but not declared in Metrics()", name)
		}
	}
	for name := range declared {
		if _, ok := o[name]; !ok {
			t.Errorf("series %s is declared but this fleet shows none of it", name)
		}
	}
}
