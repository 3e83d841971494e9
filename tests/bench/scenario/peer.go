package scenario

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/openfuyao/npu-stack/tests/bench/apicount"
	"github.com/openfuyao/npu-stack/tests/bench/peerrun"
	"github.com/openfuyao/npu-stack/tests/bench/procstat"
	"github.com/openfuyao/npu-stack/tests/bench/report"
)

// PeerNamespace holds the peer's driver and validator DaemonSets and its
// Lease (GPU Operator's operator namespace).
const PeerNamespace = "npu-peer"

// peerProcess names the peer in the CPU table.
const peerProcess = "npu-peer (NVIDIA's upgrade library)"

// runPeer upgrades the peer's fleet with the scenario's parallelism, per-node
// time and time scale, the peer's other settings GPU Operator's defaults.
// Its clock starts when gate returns, with npu-peer's start (its leader
// election, caches and first reconcile inside the clock, as npu-stack's
// rollout process starts inside its own) and the driver DaemonSet's
// bump. An error means the peer is broken: it exited, stalled, or the
// proxy counted nothing of it.
func (b *Bed) runPeer(ctx context.Context, spec Spec, gate peerrun.Gate) (*report.Peer, error) {
	n := b.cfg.Nodes
	f := b.peer
	f.SetLoadTime(spec.Timing.Total())
	b.peerVersions++
	version := fmt.Sprintf("1.%d.0", b.peerVersions)
	name := fmt.Sprintf("peer-n%d-p%s-t%s", n, strings.TrimSuffix(spec.Parallelism.Label, "%"), spec.Timing.Total())
	requeue := scaled(peerrun.PlannedRequeue, spec.TimeScale)
	if spec.PeerTimeout == 0 {
		spec.PeerTimeout = peerTimeout(peerNodes(n, spec.PeerSample), spec.Parallelism.Effective(n), spec.Timing.Total(), requeue)
	}
	simBefore := f.SimWrites()
	if _, err := b.peerProxy.Snapshot(ctx); err != nil {
		return nil, err
	}
	mark, err := b.markLoad(ctx)
	if err != nil {
		return nil, err
	}
	var cpu0 time.Duration
	var cpuErr error
	clock := func() time.Time {
		t := gate()
		cpu0, cpuErr = b.apiServerCPU()
		return t
	}
	// Three requeues without a change of any node's state, or a wave's
	// driver load and a requeue twice over (at least two minutes: the
	// start-up of a large fleet's peer): a stalled peer, not a slow one.
	stall := max(3*requeue+2*spec.Timing.Total(), 2*time.Minute)
	runCtx, cancel := context.WithTimeout(ctx, spec.PeerTimeout)
	defer cancel()
	want := peerNodes(n, spec.PeerSample)
	p, start, wall, err := f.Race(runCtx, peerrun.ProcessConfig{Binary: b.cfg.PeerBinary, Kubeconfig: b.peerKubecfg,
		MaxParallelUpgrades: spec.Parallelism.MaxParallelUpgrades(n), MaxUnavailable: maxUnavailable, TimeScale: spec.TimeScale,
		LogPath: filepath.Join(b.cfg.Dir, name+".log"), TracePath: filepath.Join(b.cfg.Dir, name+".reconciles.jsonl")}, version, stall, want, clock)
	if p != nil {
		defer func() { _, _ = p.Stop() }()
	}
	if err == nil {
		err = cpuErr
	}
	if err != nil {
		return nil, err
	}
	counts, err := b.peerProxy.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	u1, err := p.Usage()
	if err != nil {
		return nil, err
	}
	out := &report.Peer{Wall: report.S(wall), Upgraded: want, CPU: report.S(u1.CPU), PeakMB: procstat.MiB(u1.PeakRSS),
		SimWrites: int64(f.SimWrites() - simBefore), PlannedRequeue: report.S(requeue), APIServerIdleCores: b.idleAPIServer}
	if out.InProgress, err = concurrency(p.InProgress(), spec.Parallelism.Effective(n), start, filepath.Join(b.cfg.Dir, name+".inprogress.tsv")); err != nil {
		return nil, err
	}
	if out.APIServerCPU, err = b.apiServerCPUSince(cpu0, wall); err != nil {
		return nil, err
	}
	if want < n {
		// One node at a time, each node's cycle is the same wait for the
		// planned requeue: the sample's pace holds for the whole fleet.
		out.Sampled, out.SampleWall = want, report.S(wall)
		out.Wall = report.S(wall * time.Duration(n) / time.Duration(want))
	}
	load, err := b.loadSince(ctx, mark, peerProcess, u1.CPU, b.peerFlow)
	if err != nil {
		return nil, err
	}
	out.API, out.CPUByProc, out.APIServerOwnCPU, out.APIServerOwnShare = load.api, load.cpu, &load.ownAPIServerCPU, load.ownShare
	recs, err := p.Stop()
	if err != nil {
		return nil, err
	}
	split := peerrun.SplitTime(recs, start, start.Add(wall))
	out.Reconciles, out.ByTrigger, out.FailedReconciles = split.Reconciles, split.ByTrigger, split.Failed
	out.Acting, out.WaitRequeue, out.Other = report.S(split.Acting), report.S(split.WaitRequeue), report.S(split.Other)
	out.StartUp = report.S(split.StartUp)
	out.Requests = reportCounts(counts)
	return out, checkPeer(out, want)
}

// scaled is d at the time scale (0: real time).
func scaled(d time.Duration, scale float64) time.Duration {
	if scale <= 0 || scale >= 1 {
		return d
	}
	return max(time.Duration(float64(d)*scale), time.Millisecond)
}

// peerNodes is how many nodes the peer upgrades: the sample, if one is
// set and smaller than the fleet.
func peerNodes(n, sample int) int {
	if sample > 0 && sample < n {
		return sample
	}
	return n
}

func reportCounts(cs []apicount.Count) []report.Count {
	var out []report.Count
	for _, c := range cs {
		out = append(out, report.Count{Verb: c.Verb, Resource: c.Resource, N: c.N, Conflicts: c.Conflict, Write: c.Write()})
	}
	return out
}

// checkPeer fails a peer run whose counts show it did not do the upgrade:
// the library restarts every node's driver pod, lists pods, and writes.
func checkPeer(p *report.Peer, nodes int) error {
	deletes := 0
	for _, c := range p.Requests {
		if c.Verb == "delete" && c.Resource == "pods" {
			deletes += c.N
		}
	}
	switch {
	case p.WritesPerNode() == 0 || p.ListsPerNode() == 0:
		return fmt.Errorf("peer: the counting proxy saw no writes or LISTs of the peer")
	case deletes < nodes:
		return fmt.Errorf("peer: %d driver pods deleted for %d nodes: the library did not restart every node's driver", deletes, nodes)
	case p.Reconciles == 0:
		return fmt.Errorf("peer: no reconcile recorded during the upgrade")
	}
	return nil
}

// peerTimeout bounds a peer upgrade of n nodes with effective parallelism
// eff: a requeue and the per-node time per wave, three times over, plus
// an hour for the reconciles of a large fleet.
func peerTimeout(n, eff int, perNode, requeue time.Duration) time.Duration {
	waves := (n + eff - 1) / max(eff, 1)
	return time.Duration(waves)*3*(requeue+perNode) + time.Hour
}
