package report

import (
	"fmt"
	"strings"
)

// peerTargets are the comparison's targets, each stated whether or not
// this run measured it:
//   - in the unscaled scenario run at once with the peer, npu-stack's wall
//     ≤ 1.02 × the physical limit with at most p nodes in progress at once
//     (the peer's multiple shown beside it, with its most nodes at once
//     where it had more than p);
//   - npu-stack's requests per node ≤ 0.3 × the peer's, Lease writes
//     aside, in every scenario with the peer;
//   - npu-stack's API-server CPU per node ≤ 0.3 × the peer's: on its own
//     requests, in every scenario with the peer; and all the server spent
//     above idle during the side's wall (what the side's requests set off
//     in other clients included), in every scenario measured apart.
func peerTargets(ss []Scenario) []Target {
	wall := Target{Name: "npu-stack's wall, unscaled, at once with the peer", Want: fmt.Sprintf("≤ %.2f × ceil(N/p) × t, at most p nodes in progress at once", MaxRealisticMultiple),
		NotMeasured: true, Got: "not in this run (BENCH=realistic measures it)"}
	var walls []string
	wallMet := true
	reqs := Target{Name: "npu-stack's API requests per node upgraded (Lease writes aside)", Want: fmt.Sprintf("≤ %.1f × the peer's, in every scenario", MaxPeerShare),
		NotMeasured: true, Got: "no scenario with the peer in this run"}
	var reqMiss, reqAll []string
	own := Target{Name: "npu-stack's API-server CPU per node upgraded, on its own requests", Want: fmt.Sprintf("≤ %.1f × the peer's, in every scenario", MaxPeerShare),
		NotMeasured: true, Got: "no scenario with the peer in this run"}
	cpu := Target{Name: "npu-stack's API-server CPU per node upgraded, all above idle during its wall (what its requests set off included)",
		Want: fmt.Sprintf("≤ %.1f × the peer's, in every scenario measured apart", MaxPeerShare), NotMeasured: true, Got: "no scenario with the peer run apart in this run"}
	var ownShares, cpuShares shares
	for _, s := range ss {
		if s.Peer == nil {
			continue
		}
		// Judged only unscaled: a scaled per-node time shrinks the limit,
		// not the API server's latency.
		if s.Together && s.TimeScale >= 1 && s.Limit > 0 {
			m := s.LimitMultiple(s.FromBump())
			walls = append(walls, fmt.Sprintf("%s: %.3f × (%s against %s%s); the peer %.3f × (%s%s)", s.Name(), m, fmtSec(s.FromBump()), fmtSec(s.Limit),
				overNote(s.InProgress, s.Effective), s.LimitMultiple(s.Peer.Wall), fmtSec(s.Peer.Wall), overNote(s.Peer.InProgress, s.Effective)))
			// A wall kept under the limit by more nodes at once than
			// maxParallelUpgrades allows is the rollout breaking its
			// parallelism, not meeting the target.
			kept := s.InProgress == nil || s.InProgress.Max <= s.Effective
			wallMet = wallMet && m <= MaxRealisticMultiple && kept
		}
		ours, theirs := s.Side(), s.Peer.Side()
		if t := theirs.RequestsNoLeasePerNode(); t > 0 {
			share := ours.RequestsNoLeasePerNode() / t
			line := fmt.Sprintf("%s: %.2f (%.1f against %.1f)", s.Name(), share, ours.RequestsNoLeasePerNode(), t)
			reqAll = append(reqAll, line)
			if share > MaxPeerShare {
				reqMiss = append(reqMiss, line)
			}
		}
		ownShares.add(s.Name(), Side.OwnCPUPerNode, ours, theirs)
		cpuShares.add(s.Name(), Side.APIServerCPUPerNode, ours, theirs)
	}
	if len(walls) > 0 {
		wall.NotMeasured, wall.Met, wall.Got = false, wallMet, strings.Join(walls, "; ")
	}
	judge(&reqs, reqAll, reqMiss)
	judge(&own, ownShares.all, ownShares.missed)
	judge(&cpu, cpuShares.all, cpuShares.missed)
	return []Target{wall, reqs, own, cpu}
}

// shares collects one per-node CPU figure's ratio, npu-stack's over the
// peer's, scenario by scenario, for judge.
type shares struct{ all, missed []string }

func (sh *shares) add(scenario string, perNode func(Side) (float64, bool), ours, theirs Side) {
	o, ok1 := perNode(ours)
	t, ok2 := perNode(theirs)
	if !ok1 || !ok2 || t <= 0 {
		return
	}
	share := o / t
	line := fmt.Sprintf("%s: %.2f (%s against %s per node)", scenario, share, fmtSec(Seconds(o)), fmtSec(Seconds(t)))
	sh.all = append(sh.all, line)
	if share > MaxPeerShare {
		sh.missed = append(sh.missed, line)
	}
}

// judge fills a share target from its scenarios: met when none missed;
// Got names the misses, or every scenario when all met.
func judge(t *Target, all, missed []string) {
	if len(all) == 0 {
		return
	}
	t.NotMeasured, t.Met = false, len(missed) == 0
	if t.Met {
		t.Got = strings.Join(all, "; ")
		return
	}
	t.Got = fmt.Sprintf("missed in %d of %d scenarios: %s", len(missed), len(all), strings.Join(missed, "; "))
}

// tenThousand are the targets of npu-stack alone at N = 10,000 (full
// mode): the rollout's peak RSS and its step latency.
func tenThousand(ss []Scenario) []Target {
	rss := Target{Name: "`npu-hooks rollout` peak RSS at 10,000 nodes", Want: fmt.Sprintf("< %d MiB", MaxRolloutPeakMiB10k),
		NotMeasured: true, Got: "not in this run (BENCH=full measures it)"}
	lat := Target{Name: "step latency p99 at 10,000 nodes", Want: fmt.Sprintf("< %.0f s", MaxStepP99Seconds),
		NotMeasured: true, Got: "not in this run (BENCH=full measures it)"}
	var worstRSS, worstLat *Scenario
	for i, s := range ss {
		if s.Nodes != 10000 {
			continue
		}
		if worstRSS == nil || s.RolloutPeakMB > worstRSS.RolloutPeakMB {
			worstRSS = &ss[i]
		}
		if worstLat == nil || s.Steps.P99 > worstLat.Steps.P99 {
			worstLat = &ss[i]
		}
	}
	if s := worstRSS; s != nil {
		rss.NotMeasured, rss.Met, rss.Got = false, s.RolloutPeakMB < MaxRolloutPeakMiB10k, fmt.Sprintf("%.0f MiB (%s)", s.RolloutPeakMB, s.Name())
	}
	if s := worstLat; s != nil {
		lat.NotMeasured, lat.Met = false, float64(s.Steps.P99) < MaxStepP99Seconds
		lat.Got = fmt.Sprintf("%s (p50 %s, %d steps; %s)", fmtSec(s.Steps.P99), fmtSec(s.Steps.P50), s.Steps.N, s.Name())
	}
	return []Target{rss, lat}
}
