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

// runPeer upgrades the fleet's peer driver DaemonSet with the scenario's
// parallelism and per-node time, the peer's other settings GPU
// Operator's defaults. An error means the peer is broken: it exited,
// stalled, or the proxy counted nothing of it.
func (b *Bed) runPeer(ctx context.Context, spec Spec) (*report.Peer, error) {
	n := b.cfg.Nodes
	f := b.peer
	f.SetLoadTime(spec.Timing.Total())
	b.peerVersions++
	version := fmt.Sprintf("1.%d.0", b.peerVersions)
	name := fmt.Sprintf("peer-n%d-p%s-t%s", n, strings.TrimSuffix(spec.Parallelism.Label, "%"), spec.Timing.Total())
	pol := b.vals["driver"].(map[string]any)["upgradePolicy"].(map[string]any)
	p, err := f.Start(ctx, peerrun.ProcessConfig{Binary: b.cfg.PeerBinary, Kubeconfig: b.kubecfg,
		MaxParallelUpgrades: spec.Parallelism.MaxParallelUpgrades(n), MaxUnavailable: fmt.Sprint(pol["maxUnavailable"]),
		LogPath: filepath.Join(b.cfg.Dir, name+".log"), TracePath: filepath.Join(b.cfg.Dir, name+".reconciles.jsonl")})
	if err != nil {
		return nil, err
	}
	defer func() { _, _ = p.Stop() }()
	simBefore := f.SimWrites()
	b.proxy.Counter.Snapshot()
	mark, err := b.markLoad(ctx)
	if err != nil {
		return nil, err
	}
	u0, err := p.Usage()
	if err != nil {
		return nil, err
	}
	// Three requeues without a change of any node's state, or a wave's
	// driver load and a requeue twice over: a stalled peer, not a slow one.
	stall := 3*peerrun.PlannedRequeue + 2*spec.Timing.Total()
	ctx, cancel := context.WithTimeout(ctx, spec.PeerTimeout)
	defer cancel()
	want := peerNodes(n, spec.PeerSample)
	start, wall, err := p.Upgrade(ctx, f, version, stall, want)
	if err != nil {
		return nil, err
	}
	counts := b.proxy.Counter.Snapshot()
	u1, err := p.Usage()
	if err != nil {
		return nil, err
	}
	out := &report.Peer{Wall: report.S(wall), Upgraded: want, CPU: report.S(u1.CPU - u0.CPU), PeakMB: procstat.MiB(u1.PeakRSS),
		SimWrites: int64(f.SimWrites() - simBefore)}
	if want < n {
		// One node at a time, each node's cycle is the same wait for the
		// planned requeue: the sample's pace holds for the whole fleet.
		out.Sampled, out.SampleWall = want, report.S(wall)
		out.Wall = report.S(wall * time.Duration(n) / time.Duration(want))
	}
	if out.API, out.CPUByProc, err = b.loadSince(ctx, mark, peerProcess, u1.CPU-u0.CPU); err != nil {
		return nil, err
	}
	recs, err := p.Stop()
	if err != nil {
		return nil, err
	}
	split := peerrun.SplitTime(recs, start, start.Add(wall))
	out.Reconciles, out.ByTrigger, out.FailedReconciles = split.Reconciles, split.ByTrigger, split.Failed
	out.Acting, out.WaitRequeue, out.Other = report.S(split.Acting), report.S(split.WaitRequeue), report.S(split.Other)
	out.Requests = reportCounts(counts)
	return out, checkPeer(out, want)
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
func peerTimeout(n, eff int, perNode time.Duration) time.Duration {
	waves := (n + eff - 1) / max(eff, 1)
	return time.Duration(waves)*3*(peerrun.PlannedRequeue+perNode) + time.Hour
}
