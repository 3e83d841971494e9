package report

import (
	"fmt"
	"path/filepath"
	"strings"
)

// CPUPerNodeMs is the rollout's CPU time per node upgraded, in ms:
// RolloutCPUPerNodeMs, or for results written before it, RolloutCPU
// over Upgraded (0 when no node was upgraded).
func (s Scenario) CPUPerNodeMs() float64 {
	switch {
	case s.RolloutCPUPerNodeMs > 0:
		return s.RolloutCPUPerNodeMs
	case s.Upgraded > 0:
		return float64(s.RolloutCPU) * 1000 / float64(s.Upgraded)
	}
	return 0
}

// apiPerNode is the rollout's API requests' time per node upgraded ("—":
// not measured).
func apiPerNode(s Scenario) string {
	if s.RolloutAPIRequests == 0 || s.Upgraded == 0 {
		return "—"
	}
	return fmtFine(s.RolloutAPIWait / Seconds(s.Upgraded))
}

// fmtFine is fmtSec with a tenth of a millisecond under 10 ms: a
// request's mean time is often a millisecond or two.
func fmtFine(s Seconds) string {
	if s > 0 && s < 0.01 {
		return fmt.Sprintf("%.1f ms", float64(s)*1000)
	}
	return fmtSec(s)
}

// cycleTable splits a node's mean cycle into the simulated per-node time,
// the rollout's steps and the rest, so the overhead over the physical
// limit shows whose it is; beside the steps, the rollout's wait on the
// API server per node, from its profile.
func cycleTable(b *strings.Builder, ss []Scenario) {
	var rows []Scenario
	for _, s := range ss {
		if s.CycleMean > 0 {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\nWhere a node's upgrade time goes, mean per node, from the write admitting it to the write taking it out of progress: " +
		"the simulated per-node time, the rollout's steps (the sum of the node's step latencies above), " +
		"the time of the rollout's API requests per node upgraded (the time of all its requests to the end of each response, node writes, Events, " +
		"Lease renewals and LISTs, summed and divided by the nodes upgraded: the requests overlap each other and the steps, so this is the API server's " +
		"latency as the rollout met it, not a share of the cycle) " +
		"and the rest: waiting on the simulated agents and kubelet reacting, with the API server's latency for their writes under the load of the whole fleet. " +
		"The wait for a free slot comes between cycles:\n\n")
	b.WriteString("| nodes | parallelism | per-node time | cycle | the rollout's steps | its API requests per node | the rest | budget freed → admitted (mean) |\n" +
		"|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range rows {
		admit := "—"
		if l, ok := s.StepsByWhy[causeAdmitted]; ok && l.N > 0 && l.Mean > 0 {
			admit = fmtSec(l.Mean)
		}
		rest := s.CycleMean - s.CycleRollout - s.PerNode
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %s | %s |\n", s.Nodes, s.Parallelism, fmtSec(s.PerNode), fmtSec(s.CycleMean),
			fmtSec(s.CycleRollout), apiPerNode(s), fmtSec(max(rest, 0)), admit)
	}
}

// processTable shows `npu-hooks rollout` as a process, from the profiles
// it wrote in the run: what it cost per node, how far its goroutines and
// heap rose, and how long it waited on the API server.
func processTable(b *strings.Builder, ss []Scenario) {
	var rows []Scenario
	for _, s := range ss {
		if len(s.RolloutProfiles) > 0 {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n`npu-hooks rollout` as a process, from the profiles it wrote in each run (`--profile-dir`; CPU and heap profiles for `go tool pprof`, " +
		"kept beside this report): its CPU time per node upgraded, its peak goroutines and heap in use (sampled every second) beside its peak RSS, " +
		"and its requests to the API server (watches aside) with their time to the end of each response, summed (requests at once each count theirs) " +
		"and per request:\n\n")
	b.WriteString("| nodes | parallelism | per-node time | CPU | CPU per node upgraded | peak goroutines | peak heap in use | peak RSS | API requests | API time: sum / per request | profiles |\n" +
		"|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, s := range rows {
		perReq := "—"
		if s.RolloutAPIRequests > 0 {
			perReq = fmtFine(s.RolloutAPIWait / Seconds(s.RolloutAPIRequests))
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s | %.2f ms | %d | %.0f MiB | %.0f MiB | %d | %s / %s | `%s/` |\n",
			s.Nodes, s.Parallelism, fmtSec(s.PerNode), fmtSec(s.RolloutCPU), s.CPUPerNodeMs(), s.RolloutPeakGoroutines,
			s.RolloutPeakHeapMB, s.RolloutPeakMB, s.RolloutAPIRequests, fmtSec(s.RolloutAPIWait), perReq, filepath.Dir(s.RolloutProfiles[0]))
	}
}
