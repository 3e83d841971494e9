package testbed

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// Helm is the Helm SDK bound to this control plane, for installing the
// real chart in tests the way `helm` would.
type Helm struct {
	cp        *ControlPlane
	Namespace string
	// product, when set, is where charts and images come from: the
	// chart is pulled from the registry and imageRegistry points there.
	product *Product
	reg     *Registry
}

// Helm returns a Helm SDK client whose releases live in namespace and
// whose chart is the one of this checkout, from its directory.
func (c *ControlPlane) Helm(namespace string) *Helm { return &Helm{cp: c, Namespace: namespace} }

// Helm returns a Helm SDK client whose releases live in namespace and
// which installs what a user would: the chart from the registry, with
// every image pulled from there.
func (e *Env) Helm(namespace string) *Helm {
	return &Helm{cp: e.ControlPlane, Namespace: namespace, product: e.Product, reg: e.Registry}
}

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

// loadChart is the chart to install: pulled from the registry as
// `helm install oci://...` does when the test bed published one.
func (h *Helm) loadChart() (*chart.Chart, error) {
	if h.product == nil {
		return loadChartDir()
	}
	rc, err := registry.NewClient(registry.ClientOptPlainHTTP())
	if err != nil {
		return nil, fmt.Errorf("helm registry client: %w", err)
	}
	ref := strings.TrimPrefix(h.product.ChartRef(), "oci://") + ":" + h.product.ChartVersion
	res, err := rc.Pull(ref, registry.PullOptWithChart(true))
	if err != nil {
		return nil, fmt.Errorf("pull chart %s: %w", ref, err)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(res.Chart.Data))
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", ref, err)
	}
	return ch, nil
}

// values are vals with imageRegistry pointing at the test-bed registry
// and the health-watch's metrics endpoint and the fleet exporter off,
// unless the test chose them: every process node's watch runs on this
// machine, so one fixed port would be taken by the first (as
// rebooter.metricsPort, which tests set to 0 themselves), and so would
// the fleet exporter's of two releases, or of two test packages, at once
// (tests/monitoring runs it on a port and address of its own).
func (h *Helm) values(vals map[string]any) map[string]any {
	if h.product == nil {
		return vals
	}
	out := maps.Clone(vals)
	if out == nil {
		out = map[string]any{}
	}
	if _, set := out["imageRegistry"]; !set {
		out["imageRegistry"] = h.product.Registry
	}
	hw, _ := out["healthWatch"].(map[string]any)
	if _, set := hw["metricsPort"]; !set {
		hw = maps.Clone(hw)
		if hw == nil {
			hw = map[string]any{}
		}
		hw["metricsPort"] = 0
		out["healthWatch"] = hw
	}
	if _, set := out["fleetExporter"]; !set {
		out["fleetExporter"] = map[string]any{"enabled": false}
	}
	return out
}

func loadChartDir() (*chart.Chart, error) {
	path, err := ChartPath()
	if err != nil {
		return nil, err
	}
	ch, err := loader.Load(path)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", path, err)
	}
	return ch, nil
}

// InstallOptions tune Install, Upgrade and Rollback.
type InstallOptions struct {
	// DisableHooks leaves out the hook Jobs (tests that run npu-hooks
	// themselves).
	DisableHooks bool
	// Wait waits for the workloads (Helm's own wait, or WrapKubeClient's)
	// before the post hooks.
	Wait bool
	// Timeout bounds each hook and the wait (Helm's --timeout); default 5m.
	Timeout time.Duration
	// HookOutput receives the log of a failed hook (the chart asks for it
	// with helm.sh/hook-output-log-policy), as the helm CLI prints it.
	HookOutput io.Writer
	// NoDriverMirror leaves the driver images out of the registry: the
	// admin skipped Step 1.1 (copying them). By default every driver image
	// the values name is pushed as a stand-in first, as that step would.
	NoDriverMirror bool
	// WrapKubeClient replaces Helm's Kubernetes client, e.g. with another
	// wait strategy (kstatus, as Flux and Helm 4 --wait=watcher use).
	WrapKubeClient func(*kube.Client) kube.Interface
}

func (o InstallOptions) timeout() time.Duration {
	if o.Timeout <= 0 {
		return 5 * time.Minute
	}
	return o.Timeout
}

func (h *Helm) configFor(opts InstallOptions) (*action.Configuration, error) {
	cfg, err := h.Config(nil)
	if err != nil {
		return nil, err
	}
	if opts.HookOutput != nil {
		cfg.SetHookOutputFunc(func(_, _, _ string) io.Writer { return opts.HookOutput })
	}
	if opts.WrapKubeClient != nil {
		kc, ok := cfg.KubeClient.(*kube.Client)
		if !ok {
			return nil, fmt.Errorf("helm kube client is %T, not *kube.Client", cfg.KubeClient)
		}
		cfg.KubeClient = opts.WrapKubeClient(kc)
	}
	return cfg, nil
}

// Install installs the chart of this checkout as release with vals.
func (h *Helm) Install(ctx context.Context, releaseName string, vals map[string]any, opts InstallOptions) (*release.Release, error) {
	cfg, err := h.configFor(opts)
	if err != nil {
		return nil, err
	}
	ch, vals, err := h.prepare(ctx, vals, opts)
	if err != nil {
		return nil, err
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = releaseName, h.Namespace, true
	inst.DisableHooks, inst.Wait, inst.Timeout = opts.DisableHooks, opts.Wait, opts.timeout()
	rel, err := inst.RunWithContext(ctx, ch, vals)
	if err != nil {
		return nil, fmt.Errorf("helm install %s: %w", releaseName, err)
	}
	return rel, nil
}

// Upgrade upgrades release to the chart of this checkout with vals
// (ReuseValues false: vals are the whole user values, like a GitOps tool).
func (h *Helm) Upgrade(ctx context.Context, releaseName string, vals map[string]any, opts InstallOptions) (*release.Release, error) {
	cfg, err := h.configFor(opts)
	if err != nil {
		return nil, err
	}
	ch, vals, err := h.prepare(ctx, vals, opts)
	if err != nil {
		return nil, err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace = h.Namespace
	up.DisableHooks, up.Wait, up.Timeout = opts.DisableHooks, opts.Wait, opts.timeout()
	rel, err := up.RunWithContext(ctx, releaseName, ch, vals)
	if err != nil {
		return nil, fmt.Errorf("helm upgrade %s: %w", releaseName, err)
	}
	return rel, nil
}

// Rollback rolls release back to revision, like `helm rollback`.
func (h *Helm) Rollback(releaseName string, revision int, opts InstallOptions) error {
	cfg, err := h.configFor(opts)
	if err != nil {
		return err
	}
	rb := action.NewRollback(cfg)
	rb.Version, rb.Wait, rb.Timeout, rb.DisableHooks = revision, opts.Wait, opts.timeout(), opts.DisableHooks
	if err := rb.Run(releaseName); err != nil {
		return fmt.Errorf("helm rollback %s %d: %w", releaseName, revision, err)
	}
	return nil
}

// Status returns the release's latest revision.
func (h *Helm) Status(releaseName string) (*release.Release, error) {
	cfg, err := h.Config(nil)
	if err != nil {
		return nil, err
	}
	rel, err := action.NewStatus(cfg).Run(releaseName)
	if err != nil {
		return nil, fmt.Errorf("helm status %s: %w", releaseName, err)
	}
	return rel, nil
}

// Render renders the chart with vals like `helm template` (hooks
// included in Hooks), validating vals against the schema.
func (h *Helm) Render(ctx context.Context, releaseName string, vals map[string]any) (*release.Release, error) {
	ch, err := h.loadChart()
	if err != nil {
		return nil, err
	}
	return h.render(ctx, ch, releaseName, h.values(vals))
}

func (h *Helm) render(ctx context.Context, ch *chart.Chart, releaseName string, vals map[string]any) (*release.Release, error) {
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = releaseName, h.Namespace
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.1", Major: "1", Minor: "37"}
	rel, err := inst.RunWithContext(ctx, ch, vals)
	if err != nil {
		return nil, fmt.Errorf("helm template %s: %w", releaseName, err)
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
