package report

import (
	"fmt"
	"strings"
)

// Peer is the same driver upgrade, in the same run, by NVIDIA's upgrade
// library as GPU Operator's upgrade controller drives it: on the same
// nodes after npu-stack's, or at the same time on a fleet of its own
// (Scenario.Together). The library restarts each node's driver pod
// (OnDelete) and the simulated node reloads the driver in the same
// per-node time.
type Peer struct {
	// Wall is from the clock's start (npu-peer started and the driver
	// DaemonSet's template changed at that instant) to every node seen
	// upgrade-done, schedulable and running a Ready driver pod of the new
	// version.
	Wall     Seconds `json:"wallSeconds"`
	Upgraded int     `json:"upgraded"`
	// StartUp is from the clock's start to the start of its first
	// reconcile: the process, leader election and caches.
	StartUp Seconds `json:"startUpSeconds,omitempty"`
	// PlannedRequeue is GPU Operator's 2-minute requeue at the fleet's
	// time scale, as the peer ran it.
	PlannedRequeue Seconds `json:"plannedRequeueSeconds,omitempty"`
	// Sampled, when set, is the number of nodes the peer upgraded before
	// the benchmark stopped it (Upgraded is the same); SampleWall is the
	// time they took, and Wall that pace projected to the whole fleet.
	Sampled    int     `json:"sampledNodes,omitempty"`
	SampleWall Seconds `json:"sampleWallSeconds,omitempty"`
	// Requests are the peer process's, counted by its own proxy process
	// from its start to the end.
	Requests []Count `json:"requests"`
	CPU      Seconds `json:"cpuSeconds"`
	PeakMB   float64 `json:"peakRSSMiB"`
	// APIServerCPU is the API server's CPU over Wall above its idle rate
	// (nil: not separable, both sides ran at once).
	APIServerCPU       *Seconds `json:"apiServerCPUSecondsAboveIdle,omitempty"`
	APIServerIdleCores float64  `json:"apiServerIdleCores,omitempty"`
	// APIServerOwnCPU is the API server's CPU from just before npu-peer
	// started to its end, in the share APIServerOwnShare of the server's
	// request execution time that went to the peer's requests (nil: not
	// measured).
	APIServerOwnCPU   *Seconds `json:"apiServerCPUSecondsOwnRequests,omitempty"`
	APIServerOwnShare float64  `json:"apiServerExecutionShareOwnRequests,omitempty"`
	// Reconciles ran during Wall, by what started them ("event",
	// "requeue", "retry"); FailedReconciles returned an error.
	Reconciles       int            `json:"reconciles"`
	ByTrigger        map[string]int `json:"reconcilesByTrigger"`
	FailedReconciles int            `json:"failedReconciles,omitempty"`
	// Acting is the time in reconciles; WaitRequeue the idle time that
	// ended with the planned requeue; Other the rest (start-up, and idle
	// until a watched change).
	Acting      Seconds `json:"actingSeconds"`
	WaitRequeue Seconds `json:"waitingForRequeueSeconds"`
	Other       Seconds `json:"otherSeconds"`
	// SimWrites are the simulated nodes' pod status writes (driver pod
	// held and started, validator held and started).
	SimWrites int64 `json:"simulatedNodeWrites"`
	// InProgress is how many nodes the peer had in progress at once, as
	// its library's maxParallelUpgrades counts them (nil: not recorded).
	InProgress *Concurrency `json:"inProgress,omitempty"`
	API        *APILoad     `json:"apiLoad,omitempty"`
	CPUByProc  []ProcessCPU `json:"cpuByProcess,omitempty"`
}

// Side is one side's requests and costs, per node upgraded.
type Side struct {
	Requests []Count
	Upgraded int
	// Reconciles are the passes the side made: the peer's reconciles,
	// npu-stack's decisions (0: not known).
	Reconciles   int
	APIServerCPU *Seconds
	// OwnCPU is the API server's CPU on the side's own requests, which
	// had the share OwnShare of its request execution time.
	OwnCPU   *Seconds
	OwnShare float64
}

// perNode sums requests matching pred per upgraded node.
func perNode(cs []Count, upgraded int, pred func(Count) bool) float64 {
	if upgraded == 0 {
		return 0
	}
	n := 0
	for _, c := range cs {
		if pred(c) {
			n += c.N
		}
	}
	return float64(n) / float64(upgraded)
}

func isWrite(c Count) bool      { return c.Write }
func isList(c Count) bool       { return c.Verb == "list" }
func isLeaseWrite(c Count) bool { return c.Write && c.Resource == "leases" }

// WritesPerNode are every write per upgraded node, Lease writes included.
func (s Side) WritesPerNode() float64 { return perNode(s.Requests, s.Upgraded, isWrite) }

// WritesNoLeasePerNode are the writes without the Lease renewals (leader
// election's, which come with time, not with nodes).
func (s Side) WritesNoLeasePerNode() float64 {
	return perNode(s.Requests, s.Upgraded, func(c Count) bool { return c.Write && !isLeaseWrite(c) })
}

// ListsPerNode are the LISTs per upgraded node.
func (s Side) ListsPerNode() float64 { return perNode(s.Requests, s.Upgraded, isList) }

// RequestsNoLeasePerNode are every request (reads, watches, writes) per
// upgraded node, Lease writes aside: the figure the request target
// compares.
func (s Side) RequestsNoLeasePerNode() float64 {
	return perNode(s.Requests, s.Upgraded, func(c Count) bool { return !isLeaseWrite(c) })
}

// RequestsPerReconcile are the requests (Lease writes aside) per pass;
// false when the passes are not known.
func (s Side) RequestsPerReconcile() (float64, bool) {
	if s.Reconciles == 0 {
		return 0, false
	}
	return perNode(s.Requests, s.Reconciles, func(c Count) bool { return !isLeaseWrite(c) }), true
}

// APIServerCPUPerNode is the API server's CPU above idle per upgraded
// node; false when not separable.
func (s Side) APIServerCPUPerNode() (float64, bool) {
	if s.APIServerCPU == nil || s.Upgraded == 0 {
		return 0, false
	}
	return float64(*s.APIServerCPU) / float64(s.Upgraded), true
}

// OwnCPUPerNode is the API server's CPU on the side's own requests per
// upgraded node; false when not measured.
func (s Side) OwnCPUPerNode() (float64, bool) {
	if s.OwnCPU == nil || s.Upgraded == 0 {
		return 0, false
	}
	return float64(*s.OwnCPU) / float64(s.Upgraded), true
}

// Side is npu-stack's side of the scenario.
func (s Scenario) Side() Side {
	return Side{Requests: s.Requests, Upgraded: s.Upgraded, Reconciles: s.Passes, APIServerCPU: s.APIServerCPU, OwnCPU: s.APIServerOwnCPU, OwnShare: s.APIServerOwnShare}
}

// Side is the peer's side.
func (p Peer) Side() Side {
	return Side{Requests: p.Requests, Upgraded: p.Upgraded, Reconciles: p.Reconciles, APIServerCPU: p.APIServerCPU, OwnCPU: p.APIServerOwnCPU, OwnShare: p.APIServerOwnShare}
}

// WritesPerNode are the peer's writes per upgraded node.
func (p Peer) WritesPerNode() float64 { return p.Side().WritesPerNode() }

// ListsPerNode are the peer's LISTs per upgraded node.
func (p Peer) ListsPerNode() float64 { return p.Side().ListsPerNode() }

// FromBump is npu-stack's wall on the clock both sides share: from the
// version bump (the helm upgrade) to every node seen upgraded, the driver
// DaemonSet replacing its pods and the rollout's start-up inside. Runs
// recorded before it was measured fall back to pods replaced + rollout.
func (s Scenario) FromBump() Seconds {
	if s.FromBumpWall > 0 {
		return s.FromBumpWall
	}
	return s.DriverRollout + s.Wall
}

// PeerRatio is npu-stack's wall over the peer's (0 without a peer).
func (s Scenario) PeerRatio() float64 {
	if s.Peer == nil || s.Peer.Wall <= 0 {
		return 0
	}
	return float64(s.FromBump() / s.Peer.Wall)
}

// LimitMultiple is a wall over the scenario's physical limit (0 when the
// limit is 0).
func (s Scenario) LimitMultiple(wall Seconds) float64 {
	if s.Limit <= 0 {
		return 0
	}
	return float64(wall / s.Limit)
}

// ListsPerNode are npu-stack's LISTs per upgraded node.
func (s Scenario) ListsPerNode() float64 { return s.Side().ListsPerNode() }

// fmtScale writes a time scale as "1:30" or "real time".
func fmtScale(scale float64) string {
	switch {
	case scale <= 0:
		return "—"
	case scale >= 1:
		return "real time"
	}
	return fmt.Sprintf("1:%.0f", 1/scale)
}

// peerTables renders the comparison, if the run has a peer.
func peerTables(b *strings.Builder, ss []Scenario, library string) {
	var rows []Scenario
	for _, s := range ss {
		if s.Peer != nil {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "\nnpu-stack against the peer, NVIDIA's upgrade library (%s) driven as GPU Operator's upgrade controller drives it, "+
		"in the same run. One clock for both: it starts at the version bump, with each side's process started inside it "+
		"(npu-stack: the helm upgrade, the driver DaemonSet replacing its pods, then `npu-hooks rollout` as the hook runs it; "+
		"the peer: npu-peer started and its driver DaemonSet bumped at that instant, so its leader election, caches and first reconcile "+
		"are inside), and stops when the benchmark's node watch sees the side's last node done. Every timer of the peer runs at the "+
		"fleet's time scale. Limit: the physical limit ceil(N/p) × per-node time, which holds for a side that keeps at most p nodes in progress. "+
		"Most at once: the most nodes the same node watch saw in progress at one time (their upgrade-state label in a state the side's "+
		"maxParallelUpgrades counts), in bold with the time over p where a side had more than p:\n\n", library)
	b.WriteString("| nodes | parallelism | per-node time | time scale (peer's planned requeue) | run | npu-stack | peer (its start-up) | npu-stack / peer | npu-stack / limit | peer / limit | most at once: npu-stack / peer |\n")
	b.WriteString("|---:|---|---:|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, s := range rows {
		p := s.Peer
		run := "one after the other, same nodes"
		switch {
		case s.Together:
			run = "at once, fleets of their own"
		case s.PeerOwnFleet:
			run = "one after the other, fleets of their own"
		}
		fmt.Fprintf(b, "| %d | %s (%d) | %s | %s (%s) | %s | %s | %s (%s) | %s | %s | %s | %s / %s |\n",
			s.Nodes, s.Parallelism, s.Effective, fmtSec(s.PerNode), fmtScale(s.TimeScale), orDash(p.PlannedRequeue), run,
			fmtSec(s.FromBump()), p.wallCell(s.Nodes), orDash(p.StartUp), fmtRatio(s.PeerRatio()),
			fmtRatio(s.LimitMultiple(s.FromBump())), fmtRatio(s.LimitMultiple(p.Wall)), atOnce(s.InProgress), atOnce(p.InProgress))
	}
	b.WriteString("\nPer node upgraded, each side's requests as its own counting proxy (a process apart from the simulated nodes) saw them. " +
		"Lease writes are leader election's renewals (they come with time, not with nodes); requests per reconcile leave them out too. " +
		"API-server CPU: what the API server spent during the side's wall above its idle rate with the fleet set up " +
		"(the side's requests and what they set off: the simulated kubelets, the DaemonSet controller, KWOK); " +
		"\"—\" where both sides ran at once on one API server. API-server CPU on its own requests: each side's proxy forwards as a user of its own, " +
		"which a FlowSchema of its own classifies (at the exempt priority level, as the admin credentials were: never queued); the API server's CPU " +
		"from just before the side's process started to its end, in the share of the server's request execution time " +
		"(apiserver_flowcontrol_request_execution_seconds) that went to that FlowSchema, the share in brackets. Execution time is a proxy for CPU: " +
		"it includes waits on etcd, and a WATCH counts only its start, so the fan-out of events to watchers is shared out in proportion:\n\n")
	b.WriteString("| nodes | parallelism | per-node time | side | writes | writes without Lease | LISTs | requests without Lease | requests per reconcile | API-server CPU | API-server CPU on its own requests |\n")
	b.WriteString("|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range rows {
		for _, side := range []struct {
			name string
			v    Side
		}{{"npu-stack", s.Side()}, {"peer", s.Peer.Side()}} {
			rpr := "— (not reported)"
			if v, ok := side.v.RequestsPerReconcile(); ok {
				rpr = fmt.Sprintf("%.1f", v)
			}
			cpu := "—"
			if v, ok := side.v.APIServerCPUPerNode(); ok {
				cpu = fmtSec(Seconds(v))
			}
			own := "—"
			if v, ok := side.v.OwnCPUPerNode(); ok {
				own = fmt.Sprintf("%s (%.1f %%)", fmtSec(Seconds(v)), side.v.OwnShare*100)
			}
			fmt.Fprintf(b, "| %d | %s | %s | %s | %.1f | %.1f | %.2f | %.1f | %s | %s | %s |\n", s.Nodes, s.Parallelism, fmtSec(s.PerNode), side.name,
				side.v.WritesPerNode(), side.v.WritesNoLeasePerNode(), side.v.ListsPerNode(), side.v.RequestsNoLeasePerNode(), rpr, cpu, own)
		}
	}
	b.WriteString("\nThe peer's reconciles and where its time went: in reconciles / idle until its planned requeue / the rest " +
		"(start-up, and idle until a watched change); a node's cycle, mean per node, from the write admitting it to the write taking it out of progress, " +
		"as the node watch saw them, for each side:\n\n")
	b.WriteString("| nodes | parallelism | per-node time | reconciles (event / requeue / retry) | reconciling / requeue wait / rest | peer CPU | peer peak RSS | cycle: npu-stack / peer |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range rows {
		p := s.Peer
		fmt.Fprintf(b, "| %d | %s | %s | %d (%d / %d / %d) | %s / %s / %s | %s | %.0f MiB | %s / %s |\n", s.Nodes, s.Parallelism, fmtSec(s.PerNode),
			p.Reconciles, p.ByTrigger["event"], p.ByTrigger["requeue"], p.ByTrigger["retry"], fmtSec(p.Acting), fmtSec(p.WaitRequeue), fmtSec(p.Other),
			fmtSec(p.CPU), p.PeakMB, cycleCell(s.InProgress), cycleCell(p.InProgress))
	}
	b.WriteString("\nAPI requests of the peer per upgraded node, by verb and resource (conflicts in brackets):\n\n")
	b.WriteString("| nodes | parallelism | per-node time | requests per node |\n|---:|---|---:|---|\n")
	for _, s := range rows {
		fmt.Fprintf(b, "| %d | %s | %s | %s |\n", s.Nodes, s.Parallelism, fmtSec(s.PerNode), requestsPerNode(s.Peer.Requests, s.Peer.Upgraded))
	}
}

// orDash is "—" for a figure not measured (zero).
func orDash(v Seconds) string {
	if v == 0 {
		return "—"
	}
	return fmtSec(v)
}

// wallCell is the peer's wall, marked as a projection where it is one.
func (p Peer) wallCell(nodes int) string {
	if p.Sampled == 0 {
		return fmtSec(p.Wall)
	}
	return fmt.Sprintf("%s projected (%d of %d nodes in %s)", fmtSec(p.Wall), p.Sampled, nodes, fmtSec(p.SampleWall))
}

func requestsPerNode(cs []Count, upgraded int) string {
	var parts []string
	for _, c := range cs {
		p := fmt.Sprintf("%s %s %.2f", c.Verb, c.Resource, float64(c.N)/float64(max(upgraded, 1)))
		if c.Conflicts > 0 {
			p += fmt.Sprintf(" (%d)", c.Conflicts)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}
