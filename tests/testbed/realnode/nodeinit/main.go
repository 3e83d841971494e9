//go:build linux

// Command nodeinit is PID 1 of a real test-bed node (package realnode), as
// systemd is PID 1 of a kind node: started in fresh mount, network, PID,
// UTS and IPC namespaces, it builds the node's root from the plan file
// given as its argument (package noderoot), reports on file descriptor 3,
// then reaps the orphans of the node (containerd's shims re-parent to it)
// until it is told to stop. The node's daemons are started into its
// namespaces with nsenter by the test bed. On SIGTERM it passes SIGTERM to
// every process of the node and exits when they are gone or after a grace
// period; its exit makes the kernel kill whatever is left in the PID
// namespace, so a node never outlives its init.
//
// usage: nodeinit <plan.json>
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"time"

	"golang.org/x/sys/unix"

	"github.com/openfuyao/npu-stack/tests/testbed/realnode/noderoot"
)

// stopGrace is how long the node's processes get to end after SIGTERM:
// the kubelet and containerd stop in a few seconds, containers get the
// kubelet's own grace only on a real shutdown, which this is not.
const stopGrace = 10 * time.Second

func main() {
	status := os.NewFile(3, "status")
	if err := setup(); err != nil {
		_, _ = fmt.Fprintf(status, "nodeinit: %v\n", err)
		os.Exit(1)
	}
	_, _ = fmt.Fprintln(status, "ok")
	_ = status.Close()
	os.Exit(serve())
}

func setup() error {
	if len(os.Args) != 2 {
		return errors.New("usage: nodeinit <plan.json>")
	}
	if os.Getpid() != 1 {
		return fmt.Errorf("must be PID 1 of a new PID namespace, is PID %d", os.Getpid())
	}
	plan, err := noderoot.Read(os.Args[1])
	if err != nil {
		return err
	}
	return plan.Apply()
}

// serve reaps children until SIGTERM, then stops the node.
func serve() int {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGTERM, unix.SIGINT)
	for sig := range sigs {
		reap()
		if sig == unix.SIGTERM || sig == unix.SIGINT {
			return stop(sigs)
		}
	}
	return 0
}

// stop sends SIGTERM to every other process of the PID namespace and
// waits until none is left (kill(-1, 0) fails with ESRCH) or the grace
// period ends.
func stop(sigs <-chan os.Signal) int {
	_ = unix.Kill(-1, unix.SIGTERM)
	deadline := time.NewTimer(stopGrace)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		reap()
		if err := unix.Kill(-1, 0); errors.Is(err, unix.ESRCH) {
			return 0
		}
		select {
		case <-sigs:
		case <-tick.C:
		case <-deadline.C:
			fmt.Fprintln(os.Stderr, "nodeinit: processes left after the grace period; the kernel kills them as PID 1 exits")
			return 0
		}
	}
}

func reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
