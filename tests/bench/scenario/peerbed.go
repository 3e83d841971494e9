package scenario

import (
	"context"
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/bench/apicount"
	"github.com/openfuyao/npu-stack/tests/bench/apiload"
	"github.com/openfuyao/npu-stack/tests/bench/fleet"
	"github.com/openfuyao/npu-stack/tests/bench/peerrun"
)

// maxUnavailable is both sides' maxUnavailable: parallelism is what the
// scenarios vary.
const maxUnavailable = "100%"

// peerFleetLabel marks the nodes of the peer's own fleet (PeerApart).
const peerFleetLabel = "bench.npu-stack.openfuyao.com/peer-fleet"

// setupPeer installs the peer's DaemonSets (on npu-stack's healthy nodes,
// or on N nodes of its own with PeerApart, with the same ordinary
// workloads and their own Lease renewals), its counting proxy, and runs
// it once until it found every node upgrade-done: the steady state of a
// fleet GPU Operator manages, from which every upgrade starts.
func (b *Bed) setupPeer(ctx context.Context, client kubernetes.Interface) error {
	cfg := b.cfg
	fc := peerrun.FleetConfig{Client: client, Namespace: PeerNamespace, Nodes: cfg.Nodes, Log: cfg.Log,
		// The peer upgrades the healthy nodes: its node side plays no wedge.
		NodeSelector: labels.SelectorFromSet(labels.Set{contract.LabelNPUPresent: contract.True, healthyLabel: contract.True})}
	if cfg.PeerApart {
		fc.NodeSelector = labels.SelectorFromSet(labels.Set{peerFleetLabel: contract.True})
		fc.HeartbeatEvery = cfg.HeartbeatEvery
		if fc.HeartbeatEvery == 0 {
			fc.HeartbeatEvery = fleet.DefaultHeartbeatEvery
		}
		// Machines without the NPU labels: npu-stack's chart and rollout
		// never see them.
		if _, err := cfg.Env.AddNodes(ctx, cfg.Nodes, "peer", map[string]string{peerFleetLabel: contract.True}); err != nil {
			return fmt.Errorf("add the peer's %d nodes: %w", cfg.Nodes, err)
		}
	}
	var err error
	if b.peer, err = peerrun.Install(ctx, fc, firstVersion); err != nil {
		return err
	}
	if cfg.PeerApart {
		if err := b.addWorkloadsOn(ctx, peerFleetLabel+"="+contract.True); err != nil {
			return err
		}
	}
	if b.peerProxy, b.peerKubecfg, b.peerFlow, err = startProxy(ctx, cfg, "peer"); err != nil {
		return err
	}
	p, err := b.peer.Start(ctx, peerrun.ProcessConfig{Binary: cfg.PeerBinary, Kubeconfig: b.peerKubecfg, MaxParallelUpgrades: 1,
		MaxUnavailable: "100%", TimeScale: 1, LogPath: filepath.Join(cfg.Dir, "peer-settle.log")})
	if err != nil {
		return fmt.Errorf("the peer's first run (every node upgrade-done): %w", err)
	}
	_, err = p.Stop()
	return err
}

// startProxy runs a counting proxy for one side and writes the kubeconfig
// that side uses. The proxy forwards as a user of the side's own, whose
// requests the API server classifies with the FlowSchema flow: its
// execution time of them is told apart from every other client's.
func startProxy(ctx context.Context, cfg Config, side string) (p *apicount.Remote, kubeconfig, flow string, err error) {
	user := "npu-bench:" + side
	if flow, err = apiload.Attribute(ctx, cfg.Env.Client, user); err != nil {
		return nil, "", "", err
	}
	if p, err = apicount.StartProcess(ctx, cfg.ProxyBinary, cfg.Env.Kubeconfig, user, filepath.Join(cfg.Dir, "proxy-"+side+".log")); err != nil {
		return nil, "", "", err
	}
	kc := filepath.Join(cfg.Dir, "proxy-"+side+".kubeconfig")
	if err := p.WriteKubeconfig(kc); err != nil {
		_ = p.Close()
		return nil, "", "", err
	}
	return p, kc, flow, nil
}
