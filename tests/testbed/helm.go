package testbed

import (
	"context"
	"fmt"
	"path/filepath"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// Helm is the Helm SDK bound to this control plane, for installing the
// real chart in tests the way `helm` would.
type Helm struct {
	cp        *ControlPlane
	Namespace string
}

// Helm returns a Helm SDK client whose releases live in namespace.
func (c *ControlPlane) Helm(namespace string) *Helm { return &Helm{cp: c, Namespace: namespace} }

// Config is an action.Configuration for the control plane; logf receives
// Helm's debug log (nil discards it).
func (h *Helm) Config(logf func(format string, v ...any)) (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	kc, ns := h.cp.Kubeconfig, h.Namespace
	flags.KubeConfig, flags.Namespace = &kc, &ns
	if logf == nil {
		logf = func(string, ...any) {}
	}
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, h.Namespace, "secret", logf); err != nil {
		return nil, fmt.Errorf("helm init: %w", err)
	}
	return cfg, nil
}

// ChartPath is the npu-stack chart of this checkout.
func ChartPath() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "charts", "npu-stack"), nil
}

// InstallOptions tune Install.
type InstallOptions struct {
	// DisableHooks leaves out the hook Jobs (tests that run npu-hooks
	// themselves).
	DisableHooks bool
	// Wait waits for the workloads with Helm's own wait.
	Wait bool
}

// Install installs the chart of this checkout as release with vals.
func (h *Helm) Install(ctx context.Context, releaseName string, vals map[string]any, opts InstallOptions) (*release.Release, error) {
	cfg, err := h.Config(nil)
	if err != nil {
		return nil, err
	}
	path, err := ChartPath()
	if err != nil {
		return nil, err
	}
	ch, err := loader.Load(path)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", path, err)
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = releaseName, h.Namespace, true
	inst.DisableHooks, inst.Wait = opts.DisableHooks, opts.Wait
	rel, err := inst.RunWithContext(ctx, ch, vals)
	if err != nil {
		return nil, fmt.Errorf("helm install %s: %w", releaseName, err)
	}
	return rel, nil
}

// Upgrade upgrades release to the chart of this checkout with vals
// (ReuseValues false: vals are the whole user values, like a GitOps tool).
func (h *Helm) Upgrade(ctx context.Context, releaseName string, vals map[string]any, opts InstallOptions) (*release.Release, error) {
	cfg, err := h.Config(nil)
	if err != nil {
		return nil, err
	}
	path, err := ChartPath()
	if err != nil {
		return nil, err
	}
	ch, err := loader.Load(path)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", path, err)
	}
	up := action.NewUpgrade(cfg)
	up.Namespace = h.Namespace
	up.DisableHooks, up.Wait = opts.DisableHooks, opts.Wait
	rel, err := up.RunWithContext(ctx, releaseName, ch, vals)
	if err != nil {
		return nil, fmt.Errorf("helm upgrade %s: %w", releaseName, err)
	}
	return rel, nil
}

// Uninstall removes release.
func (h *Helm) Uninstall(releaseName string) error {
	cfg, err := h.Config(nil)
	if err != nil {
		return err
	}
	if _, err := action.NewUninstall(cfg).Run(releaseName); err != nil {
		return fmt.Errorf("helm uninstall %s: %w", releaseName, err)
	}
	return nil
}
