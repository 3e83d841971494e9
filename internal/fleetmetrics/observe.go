// Package fleetmetrics turns the NPU fleet's state, as the Node objects
// hold it, into Prometheus series: nodes per upgrade state, per driver
// version, awaiting a reboot approval, rebooting on purpose, and the
// rollout Jobs' and records' outcomes. It is what `npu-hooks exporter`
// serves from an always-on Deployment, so the series do not vanish while
// a node reboots, as the node agents' own series do.
//
// Observe is pure: the same inputs give the same series.
package fleetmetrics

import (
	"sort"
	"strings"
	"time"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/rollout"
)

// Policy says which reboots need no approval, as the rebooter decides.
type Policy struct {
	// AutoUpgrade: upgrade reboots need no approval
	// (driver.upgradePolicy.autoUpgrade).
	AutoUpgrade bool
	// AutoRecover: recovery reboots need no approval
	// (recoveryPolicy.autoRecover; storm protection aside).
	AutoRecover bool
	// PlannedRebootTimeout bounds how long a started reboot counts as
	// planned: a node that does not come back within it is no longer
	// inhibited, it is down (driver.upgradePolicy.rebootTimeoutSeconds).
	PlannedRebootTimeout time.Duration
}

// JobStatus is where a rollout Job stands.
type JobStatus string

const (
	JobActive    JobStatus = "active"
	JobSucceeded JobStatus = "succeeded"
	JobFailed    JobStatus = "failed"
)

// Job is a rollout Job: the hook Job, the job-mode Job or a resume
// CronJob's Job.
type Job struct {
	Name    string
	Kind    string // the Job's app.kubernetes.io/component
	Created time.Time
	Status  JobStatus
}

// Record is what the exporter reads of a rollout record (internal/
// rolloutrecord): its name, outcome and newest entry.
type Record struct {
	Name    string
	Outcome string
	Last    time.Time
	Entries int
	Dropped int
}

// Inputs are the cluster's state at one moment.
type Inputs struct {
	Nodes   []rollout.NodeView
	Jobs    []Job
	Records []Record
}

// Sample is one series: its label values in the order of its metric's
// label names, and its value.
type Sample struct {
	Labels []string
	Value  float64
}

// Observation maps each metric name (Metrics) to its samples.
type Observation map[string][]Sample

func (o Observation) add(name string, v float64, labels ...string) {
	o[name] = append(o[name], Sample{Labels: labels, Value: v})
}

// Node states beyond the driver-upgrade-state label's values, for a node
// without that label.
const (
	StateUpToDate  = "up-to-date"
	StateOutOfDate = "out-of-date"
	// StateUnknown: no driver version reported yet, or no driver profile
	// covers the node (or the driver is not managed: driver.enabled=false).
	StateUnknown = "unknown"
)

// NodeState is the state a node is counted in: its driver-upgrade-state
// label, else up-to-date, out-of-date or unknown.
func NodeState(n rollout.NodeView) string {
	switch {
	case n.RawState != "":
		return n.RawState
	case n.UpToDate():
		return StateUpToDate
	case n.OutOfDate():
		return StateOutOfDate
	}
	return StateUnknown
}

// reasons are the reboot reasons every per-reason count shows, at 0 too.
func reasons() []string {
	return []string{string(contract.ReasonUpgrade), string(contract.ReasonRecovery)}
}

func reasonOf(n rollout.NodeView) string {
	if n.RebootReason == "" {
		return "unknown"
	}
	return n.RebootReason
}

// AwaitingApproval is true when the node wants a reboot that only an
// approve-reboot annotation can authorise (manual mode), and has none.
func AwaitingApproval(n rollout.NodeView, p Policy) bool {
	if !n.RebootRequired || n.RebootFrom != "" || n.Approved {
		return false
	}
	switch contract.RebootReason(n.RebootReason) {
	case contract.ReasonUpgrade:
		return !p.AutoUpgrade
	case contract.ReasonRecovery:
		return !p.AutoRecover
	}
	return true
}

// PlannedReboot is true while npu-stack reboots the node on purpose: a
// wanted reboot is authorised (approved, or automatic for its reason) and
// not yet done, or the rebooter has started it, for at most
// PlannedRebootTimeout from its start (reboot-started-at).
func PlannedReboot(n rollout.NodeView, p Policy, now time.Time) bool {
	if n.RebootFrom != "" {
		return n.RebootStarted.IsZero() || p.PlannedRebootTimeout <= 0 || now.Sub(n.RebootStarted) <= p.PlannedRebootTimeout
	}
	return n.RebootRequired && !AwaitingApproval(n, p)
}

// installStatus is the first word of the driver pod's install-status
// annotation ("failed: …" → failed), "" when there is none.
func installStatus(s string) string {
	if s == "" {
		return ""
	}
	word := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ':' })
	if len(word) == 0 {
		return "other"
	}
	switch w := word[0]; w {
	case "stopping", "installing", "blocked", "failed", "installed":
		return w
	}
	return "other"
}

// Observe computes every series of Metrics from in at now.
func Observe(in Inputs, p Policy, now time.Time) Observation {
	o := Observation{}
	observeNodes(o, in.Nodes, p, now)
	observeJobs(o, in.Jobs)
	observeRecords(o, in.Records)
	return o
}

func observeNodes(o Observation, nodes []rollout.NodeView, p Policy, now time.Time) {
	states := map[string]int{StateUpToDate: 0, StateOutOfDate: 0, StateUnknown: 0}
	for _, s := range contract.States {
		states[string(s)] = 0
	}
	versions := map[string]int{}
	awaiting, wanted := map[string]int{}, map[string]int{}
	for _, r := range reasons() {
		awaiting[r], wanted[r] = 0, 0
	}
	notReady := 0
	for _, n := range nodes {
		state := NodeState(n)
		states[state]++
		version := n.Loaded
		if version == "" {
			version = "none"
		}
		versions[version]++
		o.add(MetricNodeDriver, 1, n.Name, version, n.Desired)
		o.add(MetricNodeDriverReady, boolValue(n.DriverReady), n.Name)
		if !n.DriverReady {
			notReady++
		}
		if n.RawState != "" {
			o.add(MetricNodeState, 1, n.Name, state)
			if !n.Since.IsZero() {
				o.add(MetricNodeStateSince, float64(n.Since.Unix()), n.Name, state)
			}
		}
		if n.State == contract.StateFailed {
			step := n.FailureStep
			if step == "" {
				step = "unknown"
			}
			o.add(MetricNodeUpgradeFailed, 1, n.Name, step)
		}
		if s := installStatus(n.InstallStatus); s != "" {
			o.add(MetricNodeInstallStatus, 1, n.Name, s)
		}
		reason := reasonOf(n)
		if n.RebootRequired {
			wanted[reason]++
			o.add(MetricNodeRebootRequired, 1, n.Name, reason)
		}
		if AwaitingApproval(n, p) {
			awaiting[reason]++
			o.add(MetricNodeAwaitingApproval, 1, n.Name, reason)
		}
		if PlannedReboot(n, p, now) {
			o.add(MetricNodePlannedReboot, 1, n.Name, reason)
		}
		if n.RebootFrom != "" && !n.RebootStarted.IsZero() {
			o.add(MetricNodeRebootStarted, float64(n.RebootStarted.Unix()), n.Name, reason)
		}
	}
	for _, s := range sortedKeys(states) {
		o.add(MetricNodes, float64(states[s]), s)
	}
	for _, v := range sortedKeys(versions) {
		o.add(MetricDriverVersionNodes, float64(versions[v]), v)
	}
	for _, r := range sortedKeys(awaiting) {
		o.add(MetricNodesAwaitingApproval, float64(awaiting[r]), r)
	}
	for _, r := range sortedKeys(wanted) {
		o.add(MetricNodesRebootRequired, float64(wanted[r]), r)
	}
	o.add(MetricNodesDriverNotReady, float64(notReady))
}

// observeJobs reports every rollout Job's status and, apart, the newest
// Job's: a resume CronJob keeps failed Jobs in its history after later
// runs succeed, so only the newest says where the rollout stands.
func observeJobs(o Observation, jobs []Job) {
	counts := map[string]int{string(JobActive): 0, string(JobSucceeded): 0, string(JobFailed): 0}
	var newest *Job
	for i, j := range jobs {
		counts[string(j.Status)]++
		if newest == nil || j.Created.After(newest.Created) || j.Created.Equal(newest.Created) && j.Name > newest.Name {
			newest = &jobs[i]
		}
	}
	for _, s := range sortedKeys(counts) {
		o.add(MetricRolloutJobs, float64(counts[s]), s)
	}
	if newest != nil {
		o.add(MetricRolloutLatestJob, 1, newest.Name, newest.Kind, string(newest.Status))
	}
}

func observeRecords(o Observation, records []Record) {
	for _, r := range records {
		outcome := r.Outcome
		if outcome == "" {
			outcome = string(rollout.Running)
		}
		o.add(MetricRolloutOutcome, 1, r.Name, outcome)
		if !r.Last.IsZero() {
			o.add(MetricRolloutLastTransition, float64(r.Last.Unix()), r.Name)
		}
		o.add(MetricRolloutRecordEntries, float64(r.Entries), r.Name)
		o.add(MetricRolloutRecordDropped, float64(r.Dropped), r.Name)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
