package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// stackContainers are the containers the chart runs on an NPU node: the
// driver pod's driver and health watch, the rebooter, the device plugin
// and the exporter.
var stackContainers = []string{"device-plugin", "driver", "exporter", "rebooter", "watch"}

// realServing waits until each real node advertises all its chips (the
// stand-in device plugin registered with its kubelet) and containerd runs
// every container of the stack, then shows `crictl ps` of the node when
// show is set.
func (s *Story) realServing(ctx context.Context, show bool) error {
	for _, n := range s.Fleet.Real {
		resource := corev1.ResourceName(n.Chips.ResourceName())
		if err := s.waitNode(ctx, n.Name(), fmt.Sprintf("allocatable %s = %d", resource, RealChips), func(node *corev1.Node) bool {
			q, ok := node.Status.Allocatable[resource]
			return ok && q.Value() == RealChips && !node.Spec.Unschedulable
		}); err != nil {
			return err
		}
		if err := waitStackRunning(ctx, n); err != nil {
			return err
		}
		if !show {
			continue
		}
		out, err := n.Crictl(ctx, "ps")
		if err != nil {
			return fmt.Errorf("node %s: crictl ps: %w", n.Name(), err)
		}
		s.printf("   $ crictl ps   # on real node %s (containerd and runc)\n", n.Name())
		for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
			s.printf("     %s\n", l)
		}
	}
	return nil
}

// waitStackRunning waits until crictl on the node lists every container
// of the stack running. Polled: the runtime has nothing to watch from
// here.
func waitStackRunning(ctx context.Context, n *RealNode) error {
	var running []string
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		names, err := n.RunningContainers(ctx)
		if last = err; err != nil {
			return false, nil //nolint:nilerr // the runtime may be restarting: ask again
		}
		running = running[:0]
		for _, name := range names {
			if slices.Contains(stackContainers, name) {
				running = append(running, name)
			}
		}
		return slices.Equal(running, stackContainers), nil
	})
	if err != nil {
		if last != nil {
			err = fmt.Errorf("%w (last crictl error: %w)", err, last)
		}
		return fmt.Errorf("node %s: containers running %v, want %v: %w", n.Name(), running, stackContainers, err)
	}
	return nil
}

// nodeDriver is the driver and the number of reboots of node name: the
// simulated host's state on a process node; on a real node the driver
// tree on its disk and the reboot.target jobs its bus ran.
func (s *Story) nodeDriver(name string) (string, int, error) {
	if node, ok := s.Env.ProcessNode(name); ok {
		hs, err := node.Host().State()
		if err != nil {
			return "", 0, err
		}
		return hs.LoadedDriver, hs.Reboots, nil
	}
	for _, n := range s.Fleet.Real {
		if n.Name() == name {
			v, err := installedDriver(n)
			return v, n.RebootJobs(), err
		}
	}
	return "", 0, fmt.Errorf("node %s vanished", name)
}
