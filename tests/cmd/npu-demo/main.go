// Command npu-demo is `make demo`: a local control plane with simulated
// NPU nodes, the chart installed, upgraded in manual mode, a chip wedge
// healed and the release rolled back, all with the real hook Jobs and node
// agents; it leaves nothing running. DEMO_NODES is the number of simulated
// NPU nodes; beside them the fleet has one real 910B and one real 310P node
// (upstream kubelet, containerd and runc; stand-in Ascend driver and
// images; they need root), left out with DEMO_REAL_NODES=0. The pictures
// of the upgrade and the rollback (npu-hooks timeline) go to DEMO_OUT,
// default .cache/demo.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/openfuyao/npu-stack/tests/demo"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "\nnpu-demo: FAILED: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	nodes := 6
	if v := os.Getenv("DEMO_NODES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("DEMO_NODES=%q: want a positive number of NPU nodes", v)
		}
		nodes = n
	}
	real := true
	switch v := os.Getenv("DEMO_REAL_NODES"); v {
	case "", "1":
	case "0":
		real = false
	default:
		return fmt.Errorf("DEMO_REAL_NODES=%q: want 1 (one real 910B and one real 310P node, the default) or 0 (none)", v)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()

	fmt.Printf("== starting a local Kubernetes v1.37 control plane with %d simulated NPU nodes", nodes)
	if real {
		fmt.Print(" and a real 910B and 310P node (kubelet, containerd, runc)")
	}
	fmt.Println()
	// This machine's architecture alone: the demo's nodes run here, and
	// the other's images would be minutes of cross-compiling on a cold Go
	// cache (tests/testbed checks both, as a release has them).
	opts := testbed.Options{Archs: []string{runtime.GOARCH}}
	opts.Progress = testbed.NewProgress(os.Stdout, testbed.EnvSteps(opts)+demo.FleetSteps(real), 0)
	env, err := testbed.NewEnv(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "npu-demo: stop: %v\n", err)
		}
	}()
	fleet, err := demo.AddFleet(ctx, env, nodes, real)
	if err != nil {
		return err
	}
	out := os.Getenv("DEMO_OUT")
	if out == "" {
		out = filepath.Join(".cache", "demo")
	}
	s := &demo.Story{Env: env, Fleet: fleet, Out: os.Stdout, Release: "npu-stack", Namespace: "npu-operator", OutDir: out}
	if err := s.Run(ctx); err != nil {
		return err
	}
	fmt.Println("\nnpu-demo: all four stories passed; the cluster is stopped")
	return nil
}
