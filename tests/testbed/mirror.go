package testbed

import (
	"context"
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/yaml"

	"github.com/openfuyao/npu-stack/internal/drivertree"
)

// prepare loads the chart to install and completes vals; unless
// opts.NoDriverMirror, it first copies the driver images the release will
// pull into the registry, as seed Step 1.1's `skopeo copy --all` does.
func (h *Helm) prepare(ctx context.Context, vals map[string]any, opts InstallOptions) (*chart.Chart, map[string]any, error) {
	ch, err := h.loadChart()
	if err != nil {
		return nil, nil, err
	}
	vals = h.values(vals)
	if h.reg == nil || opts.NoDriverMirror {
		return ch, vals, nil
	}
	rel, err := h.render(ctx, ch, "mirror", vals)
	if err != nil {
		// Invalid values: the install itself reports them as helm would.
		return ch, vals, nil //nolint:nilerr // the error belongs to the install
	}
	if err := h.mirror(ctx, rel); err != nil {
		return nil, nil, err
	}
	return ch, vals, nil
}

// MirrorDriverImages pushes a stand-in for every driver image the chart
// renders with vals (merged over the chart's defaults), as an admin
// following seed Step 1.1 copies them before an install or upgrade.
func (h *Helm) MirrorDriverImages(ctx context.Context, vals map[string]any) error {
	rel, err := h.Render(ctx, "mirror", vals)
	if err != nil {
		return err
	}
	return h.mirror(ctx, rel)
}

func (h *Helm) mirror(ctx context.Context, rel *release.Release) error {
	if h.reg == nil {
		return fmt.Errorf("mirror driver images: the chart is not installed from the test-bed registry")
	}
	for ref, d := range DriverStandIns(rel) {
		if !strings.HasPrefix(ref, h.reg.Host+"/") || h.reg.Has(ctx, ref) {
			continue
		}
		if err := h.reg.PushStandInDriver(ctx, ref, d); err != nil {
			return fmt.Errorf("mirror driver image: %w", err)
		}
	}
	return nil
}

// DriverStandIns are the driver images a rendered release pulls, each
// with what its stand-in holds so that preflight's reading of it passes,
// in either install mode: the installer (the driver DaemonSet's command
// after driver-entry's "--", else the preflight Job's --driver-installer)
// and the installed tree (the DaemonSet's --image-tree, else the
// preflight Job's --driver-image-tree, else drivertree.DefaultImageTree),
// whose version.info names the DaemonSet's --driver-version.
func DriverStandIns(rel *release.Release) map[string]StandInDriver {
	def := StandInDriver{Tree: drivertree.DefaultImageTree}
	for _, hook := range rel.Hooks {
		for _, c := range containersOf(hook.Manifest, "Job", "") {
			if c.Name != "preflight" {
				continue
			}
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--driver-image-tree="); ok {
					def.Tree = v
				}
				if v, ok := strings.CutPrefix(a, "--driver-installer="); ok {
					def.Installer = v
				}
			}
		}
	}
	out := map[string]StandInDriver{}
	for _, c := range containersOf(rel.Manifest, "DaemonSet", "npu-driver-daemonset") {
		if c.Name != "driver" {
			continue
		}
		d := def
		for i, a := range c.Command {
			if v, ok := strings.CutPrefix(a, "--driver-version="); ok {
				d.Version = v
			}
			if v, ok := strings.CutPrefix(a, "--image-tree="); ok {
				d.Tree = v
			}
			if a == "--" && i+1 < len(c.Command) {
				d.Installer = c.Command[i+1]
				break
			}
		}
		out[c.Image] = d
	}
	return out
}

// container is what the test bed reads of a rendered container.
type container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command"`
	Args    []string `json:"args"`
}

// containersOf lists the containers of the pod templates of kind in a
// rendered manifest, of the objects labelled app=<app> when app is set.
func containersOf(manifest, kind, app string) []container {
	var out []container
	for _, doc := range releaseutil.SplitManifests(manifest) {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []container `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if yaml.Unmarshal([]byte(doc), &obj) != nil || obj.Kind != kind || app != "" && obj.Metadata.Labels["app"] != app {
			continue
		}
		out = append(out, obj.Spec.Template.Spec.Containers...)
	}
	return out
}

// DriverImages lists the images of the driver containers in a rendered
// manifest: what the release's driver DaemonSets will pull.
func DriverImages(manifest string) []string {
	var out []string
	for _, c := range containersOf(manifest, "DaemonSet", "npu-driver-daemonset") {
		if c.Name == "driver" {
			out = append(out, c.Image)
		}
	}
	return out
}
