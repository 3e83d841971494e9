package report

import (
	"fmt"
	"strings"
)

// Target is one goal and whether this run met it.
type Target struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Met  bool   `json:"met"`
	// NotMeasured: this run has no scenario the target is judged on (Got
	// says which mode has).
	NotMeasured bool `json:"notMeasured,omitempty"`
}

// Limits of the targets.
const (
	MaxOverheadRatio   = 1.02
	MaxPureSeconds1000 = 60
	MaxWritesPerNode   = 15
	// MaxLists allows the three informers' initial LISTs plus a few
	// re-lists; a LIST per node would scale with N.
	MaxLists          = 10
	MaxRolloutPeakMiB = 200
	MaxAgentPeakMiB   = 30
	// MaxIdleCPUPercent is "~0 CPU when idle": under 1% of a core.
	MaxIdleCPUPercent = 1.0
	MaxStepP99Seconds = 1.0
	// MaxRealisticMultiple bounds npu-stack's wall over the physical limit
	// in the unscaled scenario run at once with the peer.
	MaxRealisticMultiple = 1.02
	// MaxPeerShare bounds npu-stack's requests per node (Lease writes
	// aside) and its API-server CPU per node, as a share of the peer's.
	MaxPeerShare = 0.3
	// MaxRolloutPeakMiB10k is the rollout's peak RSS at 10,000 nodes.
	MaxRolloutPeakMiB10k = 300
	// MaxRolloutCPUPerNodeMs bounds the rollout's own CPU time per node
	// upgraded from MinNodesCPUPerNode nodes on: below, its start-up (the
	// informers' first LISTs, the lease) is most of it.
	MaxRolloutCPUPerNodeMs = 5.0
	MinNodesCPUPerNode     = 1000 // the target's name says 1,000
)

// Targets evaluates every target the run has data for.
func Targets(r Report) []Target {
	var out []Target
	for _, s := range r.Scenarios {
		if s.Nodes == 1000 && s.PerNode > 0 {
			out = append(out, Target{Name: "overhead ratio, " + s.Name(), Want: fmt.Sprintf("≤ %.2f", MaxOverheadRatio),
				Got: fmt.Sprintf("%.3f (%s over the limit of %s)", s.Ratio(), fmtSec(s.Wall-s.Limit), fmtSec(s.Limit)), Met: s.Ratio() <= MaxOverheadRatio})
		}
		if s.Nodes == 1000 && s.PerNode == 0 && s.Parallelism == "unlimited" {
			out = append(out, Target{Name: "pure-overhead rollout of 1,000 nodes, unlimited parallelism", Want: fmt.Sprintf("< %d s", MaxPureSeconds1000),
				Got: fmtSec(s.Wall), Met: s.Wall < MaxPureSeconds1000})
		}
	}
	if len(r.Scenarios) > 0 {
		worstW, worstL, worstP99 := r.Scenarios[0], r.Scenarios[0], r.Scenarios[0]
		var missP99 []string
		for _, s := range r.Scenarios {
			if s.WritesPerNode() > worstW.WritesPerNode() {
				worstW = s
			}
			if s.Lists() > worstL.Lists() {
				worstL = s
			}
			if s.Steps.P99 > worstP99.Steps.P99 {
				worstP99 = s
			}
			if float64(s.Steps.P99) >= MaxStepP99Seconds {
				missP99 = append(missP99, fmt.Sprintf("%s: %s", s.Name(), fmtSec(s.Steps.P99)))
			}
		}
		out = append(out,
			Target{Name: "API writes per node upgraded (worst scenario)", Want: fmt.Sprintf("≤ %d", MaxWritesPerNode),
				Got: fmt.Sprintf("%.1f, of which %.1f Events (%s)", worstW.WritesPerNode(), worstW.EventsPerNode(), worstW.Name()), Met: worstW.WritesPerNode() <= MaxWritesPerNode},
			Target{Name: "no per-node LIST in steady state (worst scenario)", Want: fmt.Sprintf("≤ %d LISTs per rollout, whatever N", MaxLists),
				Got: fmt.Sprintf("%d LISTs (%s)", worstL.Lists(), worstL.Name()), Met: worstL.Lists() <= MaxLists},
		)
		got := fmt.Sprintf("%s (%s)", fmtSec(worstP99.Steps.P99), worstP99.Name())
		if len(missP99) > 0 {
			got = fmt.Sprintf("missed in %d of %d scenarios: %s", len(missP99), len(r.Scenarios), strings.Join(missP99, "; "))
		}
		out = append(out, Target{Name: "step latency p99", Want: fmt.Sprintf("< %.0f s", MaxStepP99Seconds), Got: got, Met: len(missP99) == 0})
	}
	out = append(out, peerTargets(r.Scenarios)...)
	var peak5k float64
	seen5k := false
	for _, s := range r.Scenarios {
		if s.Nodes == 5000 {
			seen5k = true
			peak5k = max(peak5k, s.RolloutPeakMB)
		}
	}
	if seen5k {
		out = append(out, Target{Name: "`npu-hooks rollout` peak RSS at 5,000 nodes", Want: fmt.Sprintf("< %d MiB", MaxRolloutPeakMiB),
			Got: fmt.Sprintf("%.0f MiB", peak5k), Met: peak5k < MaxRolloutPeakMiB})
	}
	out = append(out, cpuPerNode(r.Scenarios))
	out = append(out, tenThousand(r.Scenarios)...)
	for _, a := range r.Agents {
		out = append(out,
			Target{Name: a.Name + " peak RSS", Want: fmt.Sprintf("< %d MiB", MaxAgentPeakMiB), Got: fmt.Sprintf("%.1f MiB", a.PeakMB), Met: a.PeakMB < MaxAgentPeakMiB},
			Target{Name: a.Name + " idle CPU", Want: fmt.Sprintf("~0 (< %.0f%% of a core)", MaxIdleCPUPercent),
				Got: fmt.Sprintf("%.2f%%", a.IdleCPUPercent()), Met: a.IdleCPUPercent() < MaxIdleCPUPercent})
	}
	return out
}

// cpuPerNode is the rollout's CPU per node upgraded in the scenarios of
// at least MinNodesCPUPerNode nodes: met when every one of them is within
// MaxRolloutCPUPerNodeMs, the misses named.
func cpuPerNode(ss []Scenario) Target {
	t := Target{Name: "`npu-hooks rollout` CPU per node upgraded at N ≥ 1,000",
		Want: fmt.Sprintf("≤ %.0f ms", MaxRolloutCPUPerNodeMs), NotMeasured: true, Got: "not in this run (BENCH=full measures it)"}
	var worst *Scenario
	var miss []string
	judged := 0
	for i, s := range ss {
		if s.Nodes < MinNodesCPUPerNode || s.Upgraded == 0 {
			continue
		}
		judged++
		if worst == nil || s.CPUPerNodeMs() > worst.CPUPerNodeMs() {
			worst = &ss[i]
		}
		if s.CPUPerNodeMs() > MaxRolloutCPUPerNodeMs {
			miss = append(miss, fmt.Sprintf("%s: %.2f ms", s.Name(), s.CPUPerNodeMs()))
		}
	}
	if worst == nil {
		return t
	}
	t.NotMeasured, t.Met = false, len(miss) == 0
	t.Got = fmt.Sprintf("%.2f ms, worst (%s)", worst.CPUPerNodeMs(), worst.Name())
	if len(miss) > 0 {
		t.Got = fmt.Sprintf("missed in %d of %d scenarios: %s", len(miss), judged, strings.Join(miss, "; "))
	}
	return t
}
