// Package report turns benchmark measurements into the README table and
// the JSON record, and checks them against the targets of issue 7. It is
// pure: measurements in, text and verdicts out.
package report

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Seconds is a duration written as seconds in JSON.
type Seconds float64

// S converts a duration.
func S(d time.Duration) Seconds { return Seconds(d.Seconds()) }

// Count is API requests of one verb and resource.
type Count struct {
	Verb      string `json:"verb"`
	Resource  string `json:"resource"`
	N         int    `json:"n"`
	Conflicts int    `json:"conflicts,omitempty"`
	Write     bool   `json:"write"`
}

// Latency is a step latency distribution.
type Latency struct {
	N   int     `json:"n"`
	P50 Seconds `json:"p50"`
	P99 Seconds `json:"p99"`
	Max Seconds `json:"max"`
	// Mean is zero in results written before it was measured.
	Mean Seconds `json:"mean,omitempty"`
}

// Scenario is one full rollout.
type Scenario struct {
	Nodes int `json:"nodes"`
	// Parallelism as configured: "1", "10%", "unlimited"; Effective is
	// the node count it allows at once.
	Parallelism string  `json:"parallelism"`
	Effective   int     `json:"effectiveParallelism"`
	PerNode     Seconds `json:"perNodeSeconds"`
	Wall        Seconds `json:"wallSeconds"`
	// Limit is ceil(N / effective) × per-node time.
	Limit    Seconds `json:"physicalLimitSeconds"`
	Upgraded int     `json:"upgraded"`
	// DriverRollout is how long the driver DaemonSet took to replace its
	// pods after the helm upgrade (before the rollout starts, as with
	// helm upgrade --wait); not part of Wall.
	DriverRollout Seconds `json:"driverPodsReplacedSeconds"`

	Requests      []Count `json:"requests"`
	RolloutCPU    Seconds `json:"rolloutCPUSeconds"`
	RolloutPeakMB float64 `json:"rolloutPeakRSSMiB"`
	// RolloutCPUPerNodeMs is RolloutCPU per node upgraded, in ms. The
	// others come from the profiles the rollout wrote (npu-hooks rollout
	// --profile-dir): its peak goroutines and heap in use, sampled every
	// second; its API requests, watches aside, and their summed time to
	// the end of each response (requests at once each count theirs); and
	// the profile files, relative to the results. Zero in results written
	// before they were measured.
	RolloutCPUPerNodeMs   float64  `json:"rolloutCPUPerNodeMs,omitempty"`
	RolloutPeakGoroutines int      `json:"rolloutPeakGoroutines,omitempty"`
	RolloutPeakHeapMB     float64  `json:"rolloutPeakHeapInUseMiB,omitempty"`
	RolloutAPIRequests    int      `json:"rolloutAPIRequests,omitempty"`
	RolloutAPIWait        Seconds  `json:"rolloutAPIWaitSeconds,omitempty"`
	RolloutProfiles       []string `json:"rolloutProfiles,omitempty"`

	Steps      Latency            `json:"stepLatency"`
	StepsByWhy map[string]Latency `json:"stepLatencyByCause"`
	// CycleMean is a node's mean cycle, from the write admitting it to
	// the write taking it out of progress; CycleRollout the rollout's
	// share of it, the mean sum of the node's own step latencies. Zero in
	// results written before they were measured.
	CycleMean    Seconds `json:"cycleMeanSeconds,omitempty"`
	CycleRollout Seconds `json:"cycleRolloutMeanSeconds,omitempty"`

	// LeftBehind are the rollout's lines naming the nodes it left
	// behind: the fleet's wedged node, whose recovery waits for an
	// approval. It is not counted in Upgraded.
	LeftBehind []string `json:"leftBehind,omitempty"`
	// Passes are the decisions the rollout made (its closing log line);
	// 0 in results written before it reported them.
	Passes int `json:"decisionPasses,omitempty"`

	SimWrites int64 `json:"simulatedNodeWrites"`
	// SimPodRestarts are the pods the simulated kubelet restarted in place
	// after the reboots.
	SimPodRestarts int64 `json:"simulatedPodRestarts"`
	// SimHeartbeatMaxLag is the latest the simulator renewed a bucket of
	// node Leases, since the fleet was set up (seconds).
	SimHeartbeatMaxLag Seconds `json:"simulatedHeartbeatMaxLagSeconds,omitempty"`

	// API is the whole cluster's writes during the rollout, from the API
	// server's metrics; CPU the cores each process used meanwhile. Absent
	// from results written before they were measured.
	API *APILoad     `json:"apiLoad,omitempty"`
	CPU []ProcessCPU `json:"cpuByProcess,omitempty"`

	// TimeScale is the fleet's time scale, simulated seconds per real
	// second (1: real time; 1/30: a 10-minute node upgrade in 20 s).
	TimeScale float64 `json:"timeScale,omitempty"`
	// FromBumpWall is the wall on the clock both sides share: from the
	// version bump to the last node seen upgraded by the benchmark's watch.
	FromBumpWall Seconds `json:"fromBumpSeconds,omitempty"`
	// APIServerCPU is the API server's CPU over FromBumpWall above its
	// idle rate APIServerIdleCores (nil: not separable, the peer ran at
	// the same time).
	APIServerCPU       *Seconds `json:"apiServerCPUSecondsAboveIdle,omitempty"`
	APIServerIdleCores float64  `json:"apiServerIdleCores,omitempty"`
	// APIServerOwnCPU is the API server's CPU from just before the
	// rollout process started to its end, in the share APIServerOwnShare
	// of the server's request execution time that went to the rollout's
	// own requests (its FlowSchema's): separable also where the peer ran
	// at the same time (nil: not measured).
	APIServerOwnCPU   *Seconds `json:"apiServerCPUSecondsOwnRequests,omitempty"`
	APIServerOwnShare float64  `json:"apiServerExecutionShareOwnRequests,omitempty"`
	// Together: the peer ran at the same time, on a fleet of its own in
	// the same control plane.
	Together bool `json:"together,omitempty"`
	// PeerOwnFleet: the peer upgraded nodes of its own, not npu-stack's.
	PeerOwnFleet bool `json:"peerOwnFleet,omitempty"`

	// InProgress is how many nodes the rollout had in progress at once
	// (nil: not recorded).
	InProgress *Concurrency `json:"inProgress,omitempty"`

	// Peer is the same upgrade by NVIDIA's library (nil: not run).
	Peer *Peer `json:"peer,omitempty"`
}

// APILoad is what every client wrote during a rollout, as the API server
// counted and timed it.
type APILoad struct {
	Seconds         Seconds  `json:"seconds"`
	WritesPerSecond float64  `json:"writesPerSecond"`
	Busiest         []OpLoad `json:"busiestWrites"`
}

// OpLoad is one kind of write: its rate and the API server's latency for
// it (P50 and P99 are bucket upper bounds: "at most").
type OpLoad struct {
	Op        string  `json:"op"`
	PerSecond float64 `json:"perSecond"`
	Mean      Seconds `json:"mean"`
	P50       Seconds `json:"p50"`
	P99       Seconds `json:"p99"`
}

// ProcessCPU is the CPU one process used during a rollout, in cores
// (CPU seconds over wall seconds).
type ProcessCPU struct {
	Name  string  `json:"name"`
	Cores float64 `json:"cores"`
}

// Name labels the scenario.
func (s Scenario) Name() string {
	return fmt.Sprintf("N=%d, parallelism %s, per-node %s", s.Nodes, s.Parallelism, fmtSec(s.PerNode))
}

// Ratio is wall / physical limit (0 when the limit is 0).
func (s Scenario) Ratio() float64 {
	if s.Limit <= 0 {
		return 0
	}
	return float64(s.Wall / s.Limit)
}

// totals sums requests by a predicate.
func (s Scenario) total(pred func(Count) bool) int {
	n := 0
	for _, c := range s.Requests {
		if pred(c) {
			n += c.N
		}
	}
	return n
}

// WritesPerNode are every write request per upgraded node.
func (s Scenario) WritesPerNode() float64 { return perNode(s.Requests, s.Upgraded, isWrite) }

// EventsPerNode are the Event creations per upgraded node.
func (s Scenario) EventsPerNode() float64 {
	return perNode(s.Requests, s.Upgraded, func(c Count) bool { return c.Write && c.Resource == "events" })
}

// Lists are the LIST requests of the whole rollout.
func (s Scenario) Lists() int { return s.total(func(c Count) bool { return c.Verb == "list" }) }

// Watches are the WATCH requests of the whole rollout.
func (s Scenario) Watches() int { return s.total(func(c Count) bool { return c.Verb == "watch" }) }

// Report is one `make bench` run.
type Report struct {
	Date string `json:"date"`
	// Commit is the checkout the run measured (with "-dirty" when it had
	// uncommitted changes).
	Commit    string     `json:"commit"`
	Mode      string     `json:"mode"`
	Machine   Machine    `json:"machine"`
	Scenarios []Scenario `json:"scenarios"`
	Agents    []Agent    `json:"agents"`
	Wedge     *Wedge     `json:"wedge,omitempty"`
	Targets   []Target   `json:"targets"`
	Notes     []string   `json:"notes"`
	// PeerLibrary names the peer's library and version.
	PeerLibrary string `json:"peerLibrary,omitempty"`
}

func fmtSec(s Seconds) string {
	switch {
	case s == 0:
		return "0 s"
	case s < 1:
		return fmt.Sprintf("%.0f ms", float64(s)*1000)
	case s < 100:
		return fmt.Sprintf("%.1f s", float64(s))
	}
	return fmt.Sprintf("%.0f s", float64(s))
}

func fmtRatio(r float64) string {
	if r == 0 || math.IsNaN(r) {
		return "—"
	}
	return fmt.Sprintf("%.3f", r)
}

// Markdown renders the tables.
func Markdown(r Report) string {
	var b strings.Builder
	commit := r.Commit
	if commit == "" {
		commit = "unknown"
	}
	fmt.Fprintf(&b, "Measured %s (`BENCH=%s`) at commit %s on %d cores (%s), %s, Kubernetes %s, %s.\n\n",
		r.Date, r.Mode, commit, r.Machine.Cores, r.Machine.CPU, r.Machine.GoVersion, r.Machine.Kubernetes, r.Machine.OS)
	fmt.Fprintf(&b, "Limits: the control plane, the simulated fleet, the counting proxies and the measured processes share these %d cores, "+
		"and the machine may run other work (its share is \"other processes on the machine\" in the CPU table); the nodes are KWOK's, "+
		"their agents and kubelet played by the benchmark; times are scaled where the table says so.\n\n", r.Machine.Cores)
	b.WriteString("| nodes | parallelism | per-node time | wall | physical limit | overhead ratio | writes/node (of which Events) | LIST / WATCH | rollout CPU | rollout peak RSS | step p50 / p99 |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Scenarios {
		limit := fmtSec(s.Limit)
		if s.PerNode == 0 {
			limit = "0 s (pure overhead)"
		}
		fmt.Fprintf(&b, "| %d | %s (%d) | %s | %s | %s | %s | %.1f (%.1f) | %d / %d | %s | %.0f MiB | %s / %s |\n",
			s.Nodes, s.Parallelism, s.Effective, fmtSec(s.PerNode), fmtSec(s.Wall), limit, fmtRatio(s.Ratio()),
			s.WritesPerNode(), s.EventsPerNode(), s.Lists(), s.Watches(), fmtSec(s.RolloutCPU), s.RolloutPeakMB, fmtSec(s.Steps.P50), fmtSec(s.Steps.P99))
	}
	b.WriteString("\nAPI requests of `npu-hooks rollout` per upgraded node, by verb and resource (conflicts in brackets):\n\n")
	b.WriteString("| nodes | parallelism | per-node time | requests per node |\n|---:|---|---:|---|\n")
	for _, s := range r.Scenarios {
		fmt.Fprintf(&b, "| %d | %s | %s | %s |\n", s.Nodes, s.Parallelism, fmtSec(s.PerNode), requestsPerNode(s.Requests, s.Upgraded))
	}
	var left []string
	for _, s := range r.Scenarios {
		if len(s.LeftBehind) > 0 {
			left = append(left, fmt.Sprintf("%s: %s", s.Name(), strings.Join(s.LeftBehind, "; ")))
		}
	}
	if len(left) > 0 {
		fmt.Fprintf(&b, "\nEvery fleet has one more node, permanently wedged, whose recovery waits for an approval; it is not among the nodes counted above, and each rollout left it behind: %s.\n",
			strings.Join(left, " — "))
	}
	peerTables(&b, r.Scenarios, r.PeerLibrary)
	var restarts []string
	for _, s := range r.Scenarios {
		restarts = append(restarts, fmt.Sprintf("%s: %.2f", s.Name(), float64(s.SimPodRestarts)/float64(max(s.Upgraded, 1))))
	}
	if len(restarts) > 0 {
		fmt.Fprintf(&b, "\nPods restarted in place by the simulated kubelet after the reboots, per upgraded node: %s.\n", strings.Join(restarts, "; "))
	}
	b.WriteString("\nStep latency (the cluster allows a step → the rollout's write taking it seen), p50 / p99 by what allowed it. " +
		"One write may take several steps (every transition allowed at once goes into one node patch); each step in it that waited for something " +
		"(a free slot, the new boot ID, driver-ready and the pods Ready again after the reboot) counts once against its own cause, " +
		"and \"previous step done\" counts only states the rollout left in a write of their own:\n\n")
	b.WriteString("| nodes | parallelism | per-node time |")
	for _, k := range stepCauses {
		fmt.Fprintf(&b, " %s |", k)
	}
	b.WriteString("\n|---:|---|---:|" + strings.Repeat("---:|", len(stepCauses)) + "\n")
	for _, s := range r.Scenarios {
		fmt.Fprintf(&b, "| %d | %s | %s |", s.Nodes, s.Parallelism, fmtSec(s.PerNode))
		for _, k := range stepCauses {
			l, ok := s.StepsByWhy[k]
			if !ok || l.N == 0 {
				b.WriteString(" — |")
				continue
			}
			fmt.Fprintf(&b, " %s / %s |", fmtSec(l.P50), fmtSec(l.P99))
		}
		b.WriteString("\n")
	}
	cycleTable(&b, r.Scenarios)
	processTable(&b, r.Scenarios)
	loadTable(&b, r.Scenarios, r.Machine.Cores)
	if len(r.Agents) > 0 {
		b.WriteString("\nNode agents (one real process each, on a simulated host):\n\n")
		b.WriteString("| agent | idle CPU | busy phase | busy CPU | peak RSS | anonymous RSS at end | `--help` peak RSS |\n|---|---:|---|---:|---:|---:|---:|\n")
		for _, a := range r.Agents {
			fmt.Fprintf(&b, "| %s | %.2f%% of a core (%s over %s) | %s | %s over %s | %.1f MiB | %.1f MiB | %.1f MiB |\n",
				a.Name, a.IdleCPUPercent(), fmtSec(a.IdleCPU), fmtSec(a.IdleWindow), a.Busy, fmtSec(a.BusyCPU), fmtSec(a.BusyWindow), a.PeakMB, a.AnonMB, a.BaselineMB)
		}
	}
	if r.Wedge != nil {
		fmt.Fprintf(&b, "\nWedge → `reboot-required=true`: %s with probes every %s and a failure threshold of %d; %s beyond the probe schedule.\n",
			fmtSec(r.Wedge.Total), fmtSec(r.Wedge.Interval), r.Wedge.Threshold, fmtSec(r.Wedge.Beyond))
	}
	if len(r.Targets) > 0 {
		b.WriteString("\n| target | wanted | measured | met |\n|---|---|---|---|\n")
		for _, t := range r.Targets {
			met := "yes"
			switch {
			case t.NotMeasured:
				met = "not measured"
			case !t.Met:
				met = "**no**"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.Name, t.Want, t.Got, met)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n- %s", n)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

// stepCauses are the steplat kinds, by name, in report order (the
// report stays free of the recorder's dependencies; a test keeps the two
// lists equal).
// causeAdmitted is the step cause of an admission (steplat.Admitted).
const causeAdmitted = "budget freed"

var stepCauses = []string{causeAdmitted, "previous step done", "boot ID changed", "driver-ready and pods Ready again", "driver ready → re-roll"}

// loadTable shows the whole cluster during each rollout: every client's
// writes, the API server's own latency for the busiest of them, and the
// cores each process used. The rollout's steps are round trips through
// that API server, so this is where their latency comes from.
func loadTable(b *strings.Builder, ss []Scenario, cores int) {
	var rows []Scenario
	for _, s := range ss {
		if s.API != nil {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "\nThe cluster during each rollout: writes a second from every client (the rollout, the simulated nodes, KWOK, the controller manager), "+
		"the busiest kinds of write with the API server's own latency for them (mean / p99; the p99 is the upper bound of the API server's histogram bucket), "+
		"and the CPU each process used, in cores of the %d:\n\n", cores)
	b.WriteString("| nodes | parallelism | per-node time | writes/s | busiest writes: rate, mean / p99 | CPU (cores) |\n|---:|---|---:|---:|---|---|\n")
	for _, s := range rows {
		var ops, cpu []string
		for _, o := range s.API.Busiest {
			ops = append(ops, fmt.Sprintf("%s %.0f/s, %s / ≤ %s", o.Op, o.PerSecond, fmtSec(o.Mean), fmtSec(o.P99)))
		}
		total := 0.0
		for _, p := range s.CPU {
			total += p.Cores
			cpu = append(cpu, fmt.Sprintf("%s %.2f", p.Name, p.Cores))
		}
		fmt.Fprintf(b, "| %d | %s | %s | %.0f | %s | %s; total %.2f |\n", s.Nodes, s.Parallelism, fmtSec(s.PerNode),
			s.API.WritesPerSecond, strings.Join(ops, "; "), strings.Join(cpu, ", "), total)
	}
}
