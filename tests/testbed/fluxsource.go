package testbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// startSourceController runs Flux's source-controller against c: artifacts
// stored under c.Dir, served on a loopback port it also advertises (the
// URL helm-controller downloads from), health on another. It returns once
// the health endpoint answers.
func startSourceController(ctx context.Context, c *ControlPlane, logDir string) (*component, error) {
	bin, err := Engine("bin/source-controller")
	if err != nil {
		return nil, err
	}
	storage := filepath.Join(c.Dir, "flux", "source-controller")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		return nil, fmt.Errorf("source-controller storage: %w", err)
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	envBin, err := exec.LookPath("env")
	if err != nil {
		return nil, fmt.Errorf("start source-controller: %w", err)
	}
	storageAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
	health := "127.0.0.1:" + strconv.Itoa(ports[1])
	args := []string{
		// Its kubeconfig from $KUBECONFIG, as helm-controller's; its
		// events and leases in the namespace Flux is installed in.
		"KUBECONFIG=" + c.Kubeconfig,
		"RUNTIME_NAMESPACE=flux-system",
		bin,
		"--watch-all-namespaces=true",
		"--enable-leader-election=false",
		"--metrics-addr=0",
		"--health-addr=" + health,
		"--storage-path=" + storage,
		"--storage-addr=" + storageAddr,
		"--storage-adv-addr=" + storageAddr,
		"--log-level=debug",
		"--log-encoding=console",
		"--requeue-dependency=5s",
	}
	comp, err := startComponent("source-controller", envBin, args, logDir)
	if err != nil {
		return nil, err
	}
	if err := waitHealthy(ctx, comp, "http://"+health+"/readyz"); err != nil {
		_ = comp.stop(0)
		return nil, err
	}
	return comp, nil
}
