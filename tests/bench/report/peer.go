package report

import (
	"fmt"
	"strings"
)

// Peer is the same driver upgrade of the same fleet, in the same run, by
// NVIDIA's upgrade library as GPU Operator's upgrade controller drives
// it. The library restarts each node's driver pod (OnDelete) and the
// simulated node reloads the driver in the same per-node time.
type Peer struct {
	// Wall is from the driver DaemonSet's template change to every node
	// upgrade-done, schedulable and running a Ready driver pod of the new
	// version.
	Wall     Seconds `json:"wallSeconds"`
	Upgraded int     `json:"upgraded"`
	// Sampled, when set, is the number of nodes the peer upgraded before
	// it was stopped (Upgraded is the same); SampleWall is the time they
	// took, and Wall that pace projected to the whole fleet.
	Sampled    int     `json:"sampledNodes,omitempty"`
	SampleWall Seconds `json:"sampleWallSeconds,omitempty"`
	// Requests are the peer process's, counted by the same proxy as
	// npu-stack's rollout, from the version bump to the end.
	Requests []Count `json:"requests"`
	CPU      Seconds `json:"cpuSeconds"`
	PeakMB   float64 `json:"peakRSSMiB"`
	// Reconciles ran during Wall, by what started them ("event",
	// "requeue", "retry"); FailedReconciles returned an error.
	Reconciles       int            `json:"reconciles"`
	ByTrigger        map[string]int `json:"reconcilesByTrigger"`
	FailedReconciles int            `json:"failedReconciles,omitempty"`
	// Acting is the time in reconciles; WaitRequeue the idle time that
	// ended with the planned requeue; Other the rest (idle until a
	// watched change).
	Acting      Seconds `json:"actingSeconds"`
	WaitRequeue Seconds `json:"waitingForRequeueSeconds"`
	Other       Seconds `json:"otherSeconds"`
	// SimWrites are the simulated nodes' pod status writes (driver pod
	// held and started, validator held and started).
	SimWrites int64        `json:"simulatedNodeWrites"`
	API       *APILoad     `json:"apiLoad,omitempty"`
	CPUByProc []ProcessCPU `json:"cpuByProcess,omitempty"`
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

func isWrite(c Count) bool { return c.Write }
func isList(c Count) bool  { return c.Verb == "list" }

// WritesPerNode are the peer's writes per upgraded node.
func (p Peer) WritesPerNode() float64 { return perNode(p.Requests, p.Upgraded, isWrite) }

// ListsPerNode are the peer's LISTs per upgraded node.
func (p Peer) ListsPerNode() float64 { return perNode(p.Requests, p.Upgraded, isList) }

// EventsPerNode are the peer's Event writes per upgraded node.
func (p Peer) EventsPerNode() float64 {
	return perNode(p.Requests, p.Upgraded, func(c Count) bool { return c.Write && c.Resource == "events" })
}

// LeaseWritesPerNode are its leader election renewals per upgraded node.
func (p Peer) LeaseWritesPerNode() float64 {
	return perNode(p.Requests, p.Upgraded, func(c Count) bool { return c.Write && c.Resource == "leases" })
}

// FromBump is npu-stack's time from the version bump to every node done:
// the driver DaemonSet replacing its pods (what `helm upgrade --wait`
// waits for before the hook) and the rollout. The peer's wall starts at
// the bump too.
func (s Scenario) FromBump() Seconds { return s.DriverRollout + s.Wall }

// PeerRatio is npu-stack's time from the bump over the peer's (0 without
// a peer).
func (s Scenario) PeerRatio() float64 {
	if s.Peer == nil || s.Peer.Wall <= 0 {
		return 0
	}
	return float64(s.FromBump() / s.Peer.Wall)
}

// ListsPerNode are npu-stack's LISTs per upgraded node.
func (s Scenario) ListsPerNode() float64 { return perNode(s.Requests, s.Upgraded, isList) }

// LeaseWritesPerNode are npu-stack's Lease writes per upgraded node.
func (s Scenario) LeaseWritesPerNode() float64 {
	return perNode(s.Requests, s.Upgraded, func(c Count) bool { return c.Write && c.Resource == "leases" })
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
		"on the same fleet in the same run. Both from the version bump to every node done: npu-stack's driver DaemonSet replacing its pods "+
		"(what `helm upgrade --wait` waits for) and its rollout; the peer's restart of every driver pod. Writes: every create, update, patch "+
		"and delete, Events and Lease renewals among them. The peer's time: in reconciles / idle until its planned requeue / "+
		"idle until a watched change:\n\n", library)
	b.WriteString("| nodes | parallelism | per-node time | npu-stack (pods replaced + rollout) | peer | npu-stack / peer | writes/node npu-stack / peer (peer's Events, Lease) | LISTs/node npu-stack / peer | peer reconciles (event / requeue / retry) | peer's time: reconciling / requeue wait / rest | peer CPU | peer peak RSS |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range rows {
		p := s.Peer
		fmt.Fprintf(b, "| %d | %s (%d) | %s | %s (%s + %s) | %s | %s | %.1f / %.1f (%.1f, %.1f) | %.2f / %.2f | %d (%d / %d / %d) | %s / %s / %s | %s | %.0f MiB |\n",
			s.Nodes, s.Parallelism, s.Effective, fmtSec(s.PerNode), fmtSec(s.FromBump()), fmtSec(s.DriverRollout), fmtSec(s.Wall), p.wallCell(s.Nodes), fmtRatio(s.PeerRatio()),
			s.WritesPerNode(), p.WritesPerNode(), p.EventsPerNode(), p.LeaseWritesPerNode(), s.ListsPerNode(), p.ListsPerNode(),
			p.Reconciles, p.ByTrigger["event"], p.ByTrigger["requeue"], p.ByTrigger["retry"], fmtSec(p.Acting), fmtSec(p.WaitRequeue), fmtSec(p.Other),
			fmtSec(p.CPU), p.PeakMB)
	}
	b.WriteString("\nAPI requests of the peer per upgraded node, by verb and resource (conflicts in brackets):\n\n")
	b.WriteString("| nodes | parallelism | per-node time | requests per node |\n|---:|---|---:|---|\n")
	for _, s := range rows {
		fmt.Fprintf(b, "| %d | %s | %s | %s |\n", s.Nodes, s.Parallelism, fmtSec(s.PerNode), requestsPerNode(s.Peer.Requests, s.Peer.Upgraded))
	}
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
