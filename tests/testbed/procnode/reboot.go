// A simulated reboot: the host's new boot, the node's pods restarted and the
// new boot ID reported, late when a test asks.

package procnode

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
)

// DelayBootIDReport makes the node report the new boot ID in its status
// (status.nodeInfo.bootID) only d after each later reboot, while it is
// Ready and its pods run: a kubelet that is slow to post its node status
// after a boot, so that the rebooter's writes reach the API server first.
func (n *Node) DelayBootIDReport(d time.Duration) { n.bootIDDelay.Store(int64(d)) }

// HoldBootIDReportUntil makes the delay of DelayBootIDReport start only
// once the Node object satisfies until: a kubelet that posts its status
// only after the rebooter's writes reached the API server, however long
// the rebooter takes on a loaded machine.
func (n *Node) HoldBootIDReportUntil(until func(*corev1.Node) bool) {
	n.statusMu.Lock()
	defer n.statusMu.Unlock()
	n.bootIDHold = until
}

// SetRebootDowntime makes each later reboot keep the machine down for d
// (NotReady, no process running) before it boots. Without it a
// simulated reboot is instant, where a real one takes minutes: a test of
// what an observer sees while a node is down (a scrape, an alert) needs
// the window to be longer than its sampling.
func (n *Node) SetRebootDowntime(d time.Duration) { n.downtime.Store(int64(d)) }

// LoseOnReboot makes the next reboot take the machine down for good: its
// processes die and the node stays NotReady, like hardware that does not
// come back from a reboot.
func (n *Node) LoseOnReboot() { n.lost.Store(true) }

// watchReboots hands a reboot requested through the simulated host to the
// worker, which owns the pods.
func (n *Node) watchReboots(ctx context.Context) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := n.host.State()
		if err == nil && st.RebootRequest != "" {
			n.queue.Add(rebootKey)
		}
	}
}

// reboot models a machine reboot: every process dies, the node is briefly
// NotReady, the boot ID changes and the kubelet restarts the pods' containers
// (init containers first) as it does after a real boot.
func (n *Node) reboot(ctx context.Context) error {
	if n.gone.Load() {
		return nil
	}
	st, err := n.host.State()
	if err != nil {
		return err
	}
	if st.RebootRequest == "" {
		// A retry after the reboot itself happened but the final status
		// write failed: only that write is left to do, delay included.
		if err := n.nri.start(); err != nil {
			return fmt.Errorf("node %s: boot: %w", n.cfg.Name, err)
		}
		return n.reportBoot(ctx, st.BootID)
	}
	n.statusMu.Lock()
	n.ready = false
	n.statusMu.Unlock()
	if err := n.setStatus(ctx, nil); err != nil {
		return err
	}
	for _, r := range n.pods {
		r.kill(0)
	}
	n.nri.stop()
	if n.lost.Load() {
		n.gone.Store(true)
		return nil
	}
	if d := time.Duration(n.downtime.Load()); d > 0 {
		// The machine is down: the worker, the node's kubelet, does
		// nothing else meanwhile, as a rebooting kubelet does not.
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	rebooted, err := n.host.CompleteReboot()
	if err != nil || !rebooted {
		return err
	}
	bootID, err := n.host.BootID()
	if err != nil {
		return err
	}
	if err := n.nri.start(); err != nil {
		return fmt.Errorf("node %s: boot: %w", n.cfg.Name, err)
	}
	for key, r := range n.pods {
		r.afterReboot()
		n.queue.Add(key)
	}
	return n.reportBoot(ctx, bootID)
}

// reportBoot posts the node Ready after a boot and its new boot ID, now
// or after the DelayBootIDReport delay. A failed write is retried through
// the work queue, which comes back here, so the delay holds on a retry.
func (n *Node) reportBoot(ctx context.Context, bootID string) error {
	n.statusMu.Lock()
	n.ready = true
	n.statusMu.Unlock()
	if d := time.Duration(n.bootIDDelay.Load()); d > 0 {
		if err := n.setStatus(ctx, nil); err != nil {
			return err
		}
		go n.reportBootIDAfter(ctx, d, bootID)
		return nil
	}
	return n.setStatus(ctx, func(s *corev1.NodeStatus) { s.NodeInfo.BootID = bootID })
}

// reportBootIDAfter posts bootID in the node status d from now, unless a
// later boot has replaced it meanwhile.
func (n *Node) reportBootIDAfter(ctx context.Context, d time.Duration, bootID string) {
	n.statusMu.Lock()
	hold := n.bootIDHold
	n.statusMu.Unlock()
	if hold != nil {
		if err := n.waitNode(ctx, hold); err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "procnode %s: hold boot ID report: %v\n", n.cfg.Name, err)
			}
			return
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	if cur, err := n.host.BootID(); err != nil || cur != bootID {
		return
	}
	err := retry.OnError(retry.DefaultBackoff, func(error) bool { return ctx.Err() == nil }, func() error {
		return n.setStatus(ctx, func(s *corev1.NodeStatus) { s.NodeInfo.BootID = bootID })
	})
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "procnode %s: report boot ID: %v\n", n.cfg.Name, err)
	}
}
