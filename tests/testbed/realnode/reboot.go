package realnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// rebootTimeout bounds a reboot asked for on the bus: the node's stop and
// its next boot up to a running kubelet.
const rebootTimeout = 2 * time.Minute

// Reboot reboots the node as systemd's reboot.target does on a machine:
// the kubelet stops, then every other process (containerd, the shims,
// every container, the bus); /run, /dev, /tmp and /sys/module go with the
// node's namespaces. Then the node boots again on its disk (its /var,
// /etc, /usr, so /lib/modules): a new boot ID, the modules the installer
// left under /lib/modules/<kernel>/updates loaded, chips healthy again
// unless their fault is sticky (chips.json), a fresh bus, containerd and
// the kubelet, which reports the new boot ID. Like Start, it does not
// wait for the node to be Ready.
func (n *Node) Reboot(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return fmt.Errorf("node %s: stopped, not rebooting", n.cfg.Name)
	}
	var errs []error
	if n.init != nil {
		errs = append(errs, n.stopKubelet(ctx))
	}
	errs = append(errs, n.halt(), n.healChips())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("node %s: reboot: %w", n.cfg.Name, err)
	}
	if err := n.boot(ctx, false); err != nil {
		return fmt.Errorf("node %s: boot after reboot: %w", n.cfg.Name, errors.Join(err, n.halt()))
	}
	return nil
}

// requestReboot carries out a reboot.target job the stand-in systemd
// accepted.
func (n *Node) requestReboot() {
	n.hist.Lock()
	n.reboots++
	n.hist.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), rebootTimeout)
	defer cancel()
	err := n.Reboot(ctx)
	n.hist.Lock()
	n.rebootErr = err
	n.hist.Unlock()
}

// BootIDs are the node's boot IDs, first boot first; the last is the
// current one (or the one being booted).
func (n *Node) BootIDs() []string {
	n.hist.Lock()
	defer n.hist.Unlock()
	return slices.Clone(n.bootIDs)
}

// RebootJobs counts the reboot.target jobs the node's systemd accepted
// over its bus; RebootErr is the last such reboot's failure, if any.
func (n *Node) RebootJobs() int {
	n.hist.Lock()
	defer n.hist.Unlock()
	return n.reboots
}

// RebootErr is the failure of the last reboot asked for on the bus.
func (n *Node) RebootErr() error {
	n.hist.Lock()
	defer n.hist.Unlock()
	return n.rebootErr
}

// Logind is what the stand-in logind of the node's boot-th boot (0 the
// first, as BootIDs) saw and did; ok is false for a boot without logind
// (Config.NoLogind) or one that has not happened.
func (n *Node) Logind(boot int) (rec LogindRecord, ok bool) {
	n.hist.Lock()
	var l *standinLogind
	if boot >= 0 && boot < len(n.loginds) {
		l = n.loginds[boot]
	}
	n.hist.Unlock()
	if l == nil {
		return LogindRecord{}, false
	}
	return l.record(), true
}
