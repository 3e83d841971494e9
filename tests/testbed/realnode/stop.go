package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// stopTimeout bounds the init's own stop (it gives the node's processes
// 10 s) before it is killed.
const stopTimeout = 20 * time.Second

// Stop ends the node: SIGTERM to its init, which passes it to every
// process of the node (kubelet, containerd, shims, containers) and exits;
// the kernel then kills anything left in the PID namespace and, with the
// last process, drops the node's mount namespace (every mount made in
// it) and network namespace. Stop closes the forwarders (their sockets
// hold the network namespace), deletes the veth and removes the node's
// cgroups. The Node object stays in the API, NotReady, as after a power
// loss. A reboot in progress finishes first; none starts after. Stop is
// safe to call more than once.
func (n *Node) Stop() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopped = true
	return n.halt()
}

// halt ends the current boot of the node. Called with n.mu held.
func (n *Node) halt() error {
	var errs []error
	n.logind.stop()
	n.bus.stop()
	n.bus = nil
	if n.init != nil && n.init.Process != nil {
		_ = n.init.Process.Signal(syscall.SIGTERM)
		timer := time.NewTimer(stopTimeout)
		select {
		case err := <-n.initErr:
			n.initErr <- err
		case <-timer.C:
			_ = n.init.Process.Kill()
			err := <-n.initErr
			n.initErr <- err
		}
		timer.Stop()
	}
	for _, f := range n.fwds {
		errs = append(errs, f.close())
	}
	n.fwds = nil
	for _, d := range n.daemons {
		// nsenter ends with its child; make sure.
		_ = d.Process.Kill()
	}
	n.daemons = nil
	errs = append(errs, n.net.deleteVeth())
	errs = append(errs, n.removeCgroups())
	return errors.Join(errs...)
}

// stopKubelet ends the node's kubelet and waits for it to exit, the first
// step of a reboot as systemd stops kubelet.service before the rest.
func (n *Node) stopKubelet(ctx context.Context) error {
	pids, err := n.processes("kubelet")
	if err != nil {
		return err
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	// A process's exit has nothing to watch from outside its parent.
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		left, err := n.processes("kubelet")
		return len(left) == 0, err
	})
	if err != nil {
		return fmt.Errorf("node %s: stop the kubelet: %w", n.cfg.Name, err)
	}
	return nil
}

// processes lists the host PIDs of the node's processes named comm.
func (n *Node) processes(comm string) ([]int, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns", "pid")); err != nil || ns != n.pidNS {
			continue
		}
		if c, err := os.ReadFile(filepath.Join("/proc", p.Name(), "comm")); err == nil && strings.TrimSpace(string(c)) == comm {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Leftovers lists what of the node still exists on the host after Stop:
// processes in its PID namespace, its veth, its cgroups, mounts under its
// directory. Empty when the teardown was complete.
func (n *Node) Leftovers() ([]string, error) {
	var left []string
	if n.pidNS != "" {
		procs, err := os.ReadDir("/proc")
		if err != nil {
			return nil, fmt.Errorf("leftovers: %w", err)
		}
		for _, p := range procs {
			if _, err := strconv.Atoi(p.Name()); err != nil {
				continue
			}
			if ns, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns", "pid")); err == nil && ns == n.pidNS {
				left = append(left, "process "+p.Name()+" in the node's PID namespace")
			}
			if ns, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns", "net")); err == nil && n.netNS != "" && ns == n.netNS {
				left = append(left, "process "+p.Name()+" in the node's network namespace")
			}
		}
	}
	if n.net.vethName != "" {
		if _, err := os.Stat(filepath.Join("/sys/class/net", n.net.vethName)); err == nil {
			left = append(left, "veth "+n.net.vethName)
		}
	}
	cgs, err := cgroupLeftovers(n.cfg.Name)
	if err != nil {
		return nil, err
	}
	for _, c := range cgs {
		left = append(left, "cgroup "+c)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("leftovers: %w", err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		if strings.Contains(line, n.cfg.Dir) {
			left = append(left, "mount "+line)
		}
	}
	return left, nil
}
