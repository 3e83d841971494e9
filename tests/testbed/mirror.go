package testbed

import (
	"context"
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/yaml"
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
	if err := h.mirror(ctx, rel.Manifest); err != nil {
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
	return h.mirror(ctx, rel.Manifest)
}

func (h *Helm) mirror(ctx context.Context, manifest string) error {
	if h.reg == nil {
		return fmt.Errorf("mirror driver images: the chart is not installed from the test-bed registry")
	}
	for _, ref := range DriverImages(manifest) {
		if !strings.HasPrefix(ref, h.reg.Host+"/") || h.reg.Has(ctx, ref) {
			continue
		}
		if err := h.reg.PushStandIn(ctx, ref); err != nil {
			return fmt.Errorf("mirror driver image: %w", err)
		}
	}
	return nil
}

// DriverImages lists the images of the driver containers in a rendered
// manifest: what the release's driver DaemonSets will pull.
func DriverImages(manifest string) []string {
	var out []string
	for _, doc := range releaseutil.SplitManifests(manifest) {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Name  string `json:"name"`
							Image string `json:"image"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if yaml.Unmarshal([]byte(doc), &obj) != nil || obj.Kind != "DaemonSet" || obj.Metadata.Labels["app"] != "npu-driver-daemonset" {
			continue
		}
		for _, c := range obj.Spec.Template.Spec.Containers {
			if c.Name == "driver" {
				out = append(out, c.Image)
			}
		}
	}
	return out
}
