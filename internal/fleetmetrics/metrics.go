package fleetmetrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The series of the fleet exporter (docs/observability.md lists each).
const (
	MetricNodes                 = "npu_fleet_nodes"
	MetricDriverVersionNodes    = "npu_fleet_driver_version_nodes"
	MetricNodesAwaitingApproval = "npu_fleet_nodes_awaiting_approval"
	MetricNodesRebootRequired   = "npu_fleet_nodes_reboot_required"
	MetricNodesDriverNotReady   = "npu_fleet_nodes_driver_not_ready"
	MetricNodeState             = "npu_fleet_node_upgrade_state"
	MetricNodeStateSince        = "npu_fleet_node_upgrade_state_since_timestamp_seconds"
	MetricNodeUpgradeFailed     = "npu_fleet_node_upgrade_failed"
	MetricNodeInstallStatus     = "npu_fleet_node_driver_install_status"
	MetricNodeDriver            = "npu_fleet_node_driver_info"
	MetricNodeDriverReady       = "npu_fleet_node_driver_ready"
	MetricNodeRebootRequired    = "npu_fleet_node_reboot_required"
	MetricNodeAwaitingApproval  = "npu_fleet_node_awaiting_approval"
	MetricNodePlannedReboot     = "npu_fleet_node_planned_reboot"
	MetricNodeRebootStarted     = "npu_fleet_node_reboot_started_timestamp_seconds"
	MetricRolloutJobs           = "npu_fleet_rollout_jobs"
	MetricRolloutLatestJob      = "npu_fleet_rollout_latest_job"
	MetricRolloutOutcome        = "npu_fleet_rollout_outcome"
	MetricRolloutLastTransition = "npu_fleet_rollout_last_transition_timestamp_seconds"
	MetricRolloutRecordEntries  = "npu_fleet_rollout_record_entries"
	MetricRolloutRecordDropped  = "npu_fleet_rollout_record_dropped_entries"
)

// Def describes one series of the exporter.
type Def struct {
	Name   string
	Help   string
	Labels []string
}

// Metrics lists every series the exporter serves, all gauges.
func Metrics() []Def {
	return []Def{
		{MetricNodes, "NPU nodes per driver upgrade state: the driver-upgrade-state label, else up-to-date, out-of-date (queued or left behind) or unknown (no version reported, no profile).", []string{"state"}},
		{MetricDriverVersionNodes, "NPU nodes per driver version loaded in the running kernel (driver-version label; none = not reported).", []string{"version"}},
		{MetricNodesAwaitingApproval, "NPU nodes whose wanted reboot waits for an approve-reboot annotation, by reason.", []string{"reason"}},
		{MetricNodesRebootRequired, "NPU nodes with reboot-required=true, by reason.", []string{"reason"}},
		{MetricNodesDriverNotReady, "NPU nodes whose driver-ready label is not true.", nil},
		{MetricNodeState, "1 for each NPU node in an upgrade state (driver-upgrade-state label set).", []string{"node", "state"}},
		{MetricNodeStateSince, "When the node entered its upgrade state (driver-upgrade.since), Unix seconds.", []string{"node", "state"}},
		{MetricNodeUpgradeFailed, "1 while the node is upgrade-failed, with the step that failed.", []string{"node", "step"}},
		{MetricNodeInstallStatus, "1 for the driver pod's install over a loaded driver (install-status annotation: stopping, installing, blocked, failed, installed).", []string{"node", "status"}},
		{MetricNodeDriver, "1 per NPU node: the driver version loaded (none = not reported) and the one its profile wants (empty = no profile).", []string{"node", "version", "desired_version"}},
		{MetricNodeDriverReady, "1 if the node's driver-ready label is true, else 0.", []string{"node"}},
		{MetricNodeRebootRequired, "1 while the node has reboot-required=true, by reason.", []string{"node", "reason"}},
		{MetricNodeAwaitingApproval, "1 while the node's wanted reboot waits for an approve-reboot annotation.", []string{"node", "reason"}},
		{MetricNodePlannedReboot, "1 while npu-stack reboots the node on purpose (authorised, or started and not past the reboot timeout): the inhibition source for node-down alerts.", []string{"node", "reason"}},
		{MetricNodeRebootStarted, "When the rebooter started the node's reboot in progress (reboot-started-at, the node's clock), Unix seconds.", []string{"node", "reason"}},
		{MetricRolloutJobs, "Rollout Jobs (hook, job mode, resume) in the namespace, by status.", []string{"status"}},
		{MetricRolloutLatestJob, "1 for the newest rollout Job, with its status (active, succeeded, failed).", []string{"job_name", "kind", "status"}},
		{MetricRolloutOutcome, "1 per rollout record with the outcome of its last run (running, finished, paused, stuck, deadline).", []string{"rollout", "outcome"}},
		{MetricRolloutLastTransition, "When the rollout record's newest entry was written, Unix seconds.", []string{"rollout"}},
		{MetricRolloutRecordEntries, "Entries the rollout record holds.", []string{"rollout"}},
		{MetricRolloutRecordDropped, "Oldest entries the rollout record dropped to stay within its size cap.", []string{"rollout"}},
	}
}

// Source reads the cluster's state for one scrape.
type Source func() (Inputs, error)

// Collector is a prometheus.Collector computing every series from Source
// at each scrape: nothing is cached between scrapes, so a node that left
// the fleet leaves no stale series.
type Collector struct {
	source Source
	policy Policy
	now    func() time.Time
	descs  map[string]*prometheus.Desc
}

// NewCollector builds the collector; now is the clock (time.Now).
func NewCollector(source Source, p Policy, now func() time.Time) *Collector {
	c := &Collector{source: source, policy: p, now: now, descs: map[string]*prometheus.Desc{}}
	for _, d := range Metrics() {
		c.descs[d.Name] = prometheus.NewDesc(d.Name, d.Help, d.Labels, nil)
	}
	return c
}

// Describe sends every series' descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect reads the source and sends every series; a source that cannot
// be read fails the scrape (so `up` says so) rather than serving zeros.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	in, err := c.source()
	if err != nil {
		for _, d := range c.descs {
			ch <- prometheus.NewInvalidMetric(d, err)
			return
		}
	}
	for name, samples := range Observe(in, c.policy, c.now()) {
		desc, ok := c.descs[name]
		if !ok {
			ch <- prometheus.NewInvalidMetric(prometheus.NewDesc(name, "undeclared", nil, nil), fmt.Errorf("fleet exporter: series %s is not declared in Metrics()", name))
			continue
		}
		for _, s := range samples {
			m, err := prometheus.NewConstMetric(desc, prometheus.GaugeValue, s.Value, s.Labels...)
			if err != nil {
				m = prometheus.NewInvalidMetric(desc, fmt.Errorf("fleet exporter: series %s: %w", name, err))
			}
			ch <- m
		}
	}
}
