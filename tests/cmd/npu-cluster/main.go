// Command npu-cluster runs the local test cluster for people: `make cluster`
// starts it in the background, `make cluster-down` stops it, and
// `npu-cluster wedge` injects chip faults into a process-backed node.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "npu-cluster: %v\n", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var stateDir string
	root := &cobra.Command{Use: "npu-cluster", Short: "Local Kubernetes control plane with simulated NPU nodes", SilenceUsage: true, SilenceErrors: true}
	root.PersistentFlags().StringVar(&stateDir, "state-dir", ".cache/cluster", "where the cluster keeps its data, kubeconfig and logs")
	root.AddCommand(newUp(&stateDir), newWedge(&stateDir))
	return root
}

func newUp(stateDir *string) *cobra.Command {
	var kwokNodes, procNodes, registryPort int
	var chip string
	var driverVersions, archs []string
	var flux, argocd bool
	cmd := &cobra.Command{
		Use:   "up",
		Short: "start the cluster and keep it running until SIGTERM or SIGINT",
		RunE: func(cmd *cobra.Command, _ []string) error {
			runDir := filepath.Join(*stateDir, "run")
			if err := os.RemoveAll(runDir); err != nil {
				return fmt.Errorf("clear %s: %w", runDir, err)
			}
			if err := os.MkdirAll(runDir, 0o755); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			// Minutes once: the first start builds npu-stack's binaries
			// (client-go and all) into a cold Go cache.
			startCtx, cancel := context.WithTimeout(ctx, 20*time.Minute)
			defer cancel()
			opts := testbed.Options{Dir: runDir, RegistryPort: registryPort, Archs: archs}
			opts.Progress = testbed.NewProgress(os.Stdout, testbed.EnvSteps(opts)+1, 0)
			env, err := testbed.NewEnv(startCtx, opts)
			if err != nil {
				return err
			}
			defer func() {
				if err := env.Stop(); err != nil {
					fmt.Fprintf(os.Stderr, "npu-cluster: stop: %v\n", err)
				}
			}()
			what := fmt.Sprintf("starting %d process-backed %s nodes, a CPU node and %d KWOK nodes; driver images %v into the registry", procNodes, chip, kwokNodes, driverVersions)
			if err := opts.Progress.Step(what, func() error { return addNodes(startCtx, env, procNodes, kwokNodes, chip, driverVersions) }); err != nil {
				return err
			}
			stopEngines, err := startEngines(startCtx, env, flux, argocd)
			defer func() {
				if err := stopEngines(); err != nil {
					fmt.Fprintf(os.Stderr, "npu-cluster: stop engines: %v\n", err)
				}
			}()
			if err != nil {
				return err
			}
			kubeconfig, _ := filepath.Abs(env.Kubeconfig)
			ready := filepath.Join(*stateDir, "ready")
			if err := os.WriteFile(ready, []byte(kubeconfig+"\n"), 0o644); err != nil {
				return err
			}
			defer func() { _ = os.Remove(ready) }()
			fmt.Printf("cluster ready: KUBECONFIG=%s\nregistry: %s\nchart: %s --version %s\n", kubeconfig, env.Registry.Host, env.Product.ChartRef(), env.Product.ChartVersion)
			if err := os.WriteFile(filepath.Join(*stateDir, "registry"), []byte(env.Registry.Host+"\n"), 0o644); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(*stateDir, "chart-version"), []byte(env.Product.ChartVersion+"\n"), 0o644); err != nil {
				return err
			}
			<-ctx.Done()
			fmt.Println("stopping cluster")
			return nil
		},
	}
	cmd.Flags().IntVar(&procNodes, "process-nodes", 3, "NPU nodes whose npu-stack pods run as real processes")
	cmd.Flags().IntVar(&kwokNodes, "kwok-nodes", 0, "additional KWOK-simulated NPU nodes")
	cmd.Flags().StringVar(&chip, "chip", "910b", "NPU chip of the nodes")
	cmd.Flags().IntVar(&registryPort, "registry-port", 5000, "loopback port of the cluster's OCI registry (0: any free port)")
	cmd.Flags().StringSliceVar(&driverVersions, "driver-versions", []string{"25.3.0", "25.5.0"}, "driver versions whose images (default profile) are copied into the registry at start")
	cmd.Flags().StringSliceVar(&archs, "archs", []string{runtime.GOARCH}, "architectures of npu-stack's images in the registry (this machine's by default: its nodes run here; amd64,arm64 as a release)")
	cmd.Flags().BoolVar(&flux, "flux", false, "also run Flux's source-controller and helm-controller (make engines first)")
	cmd.Flags().BoolVar(&argocd, "argocd", false, "also run Argo CD's application controller, repo server and redis in namespace argocd (make engines first)")
	return cmd
}

// addNodes starts up's nodes: procNodes process-backed NPU nodes of chip,
// a CPU node for the hook Jobs, which the chart steers away from NPU nodes
// (one of them may be rebooting), and kwokNodes KWOK nodes; and copies
// the default profile's driver images of driverVersions into the
// registry, as seed Step 1.1 copies them before an upgrade.
func addNodes(ctx context.Context, env *testbed.Env, procNodes, kwokNodes int, chip string, driverVersions []string) error {
	if _, err := env.AddProcessNodes(ctx, procNodes, testbed.NodeSpec{Chip: chip}); err != nil {
		return err
	}
	if _, err := env.AddProcessNodes(ctx, 1, testbed.NodeSpec{Prefix: "cpu", CPU: true}); err != nil {
		return err
	}
	if _, err := env.AddNPUNodes(ctx, kwokNodes, testbed.NodeSpec{Prefix: "kwok-npu", Chip: chip}); err != nil {
		return err
	}
	for _, v := range driverVersions {
		if err := env.Helm("npu-operator").MirrorDriverImages(ctx, map[string]any{"driver": map[string]any{"version": v}}); err != nil {
			return err
		}
	}
	return nil
}
