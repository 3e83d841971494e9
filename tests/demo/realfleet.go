package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/ociimage"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/realnode"
	"github.com/openfuyao/npu-stack/tests/testbed/standin"
)

// RealChips is how many chips each real node has: enough for the
// self-healing story's chip 3.
const RealChips = 4

// realModels are the real nodes of the demo: one per stand-in chip model,
// keyed by the test bed's chip label.
var realModels = []struct{ chip, model string }{{"910b", standin.Model910B}, {"310p", standin.Model310P}}

// RealNode is a node of the demo running the upstream kubelet, containerd
// and runc on a host root built from docs/host-contract.md, with the
// stand-in Ascend driver, device plugin and exporter.
type RealNode struct {
	*realnode.Node
	Chip  string        // the chart profile's chip label (910b, 310p)
	Chips standin.Chips // its chips.json when healthy
}

// driverRoot is the chart's default driver.hostDriverPath, where the
// stand-in installer puts the driver tree.
const driverRoot = "/usr/local/Ascend/driver"

// addRealNodes starts one real node per chip model. The test bed writes
// their chips.json; the driver's user, which the vendor installer
// requires and does not create, is added here (as tests/realnode does).
func addRealNodes(ctx context.Context, env *testbed.Env) ([]*RealNode, error) {
	var nodes []*RealNode
	for _, m := range realModels {
		n, err := env.AddRealNode(ctx, testbed.NodeSpec{Prefix: "real-" + m.chip, Chip: m.chip, ChipCount: RealChips, OS: OS})
		if err != nil {
			return nil, err
		}
		if err := standin.AddDriverUser(n.Path); err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name(), err)
		}
		nodes = append(nodes, &RealNode{Node: n, Chip: m.chip, Chips: standin.NewChips(m.model, RealChips)})
	}
	return nodes, nil
}

// realProfiles are the driver profiles of the real nodes: their kernel
// label is the machine's `uname -r`, so they need profiles (and driver
// images) of their own unless that is the process nodes' kernel.
func (f *Fleet) realProfiles() []any {
	var out []any
	for _, n := range f.Real {
		if n.KernelRelease() == Kernel {
			continue
		}
		out = append(out, map[string]any{"name": n.Chip + "-real", "chip": n.Chip, "kernel": n.KernelRelease(), "os": OS, "nodeSelector": map[string]any{}})
	}
	return out
}

// standins are the stand-in Ascend artefacts of the real nodes: the
// driver user space (so package and image) of each model at each demo
// version, the device plugin and the exporter.
type standins struct {
	kit    *standin.Kit                  // v1: every model, the agents' binaries
	spaces map[string]*standin.UserSpace // v2, by model
}

// driverImage is the stand-in driver image of model at version.
func (b *standins) driverImage(version, model string) (ggcrv1.ImageIndex, error) {
	if version == b.kit.Version {
		return b.kit.DriverImage(model)
	}
	u, ok := b.spaces[model]
	if !ok || u.Version != version {
		return nil, fmt.Errorf("stand-in driver %s of %s: not built", version, model)
	}
	return u.DriverImage()
}

// buildStandins compiles the stand-ins into dir, the two versions at once
// (gcc and go build each use one core at a time): a few seconds of the
// demo's start, while its nodes boot.
func buildStandins(ctx context.Context, dir string) (*standins, error) {
	root, err := testbed.RepoRoot()
	if err != nil {
		return nil, err
	}
	b := &standins{spaces: map[string]*standin.UserSpace{}}
	models := []string{standin.Model910B, standin.Model310P}
	type result struct {
		model string
		u     *standin.UserSpace
		err   error
	}
	done := make(chan result, len(models))
	for _, m := range models {
		go func() {
			u, err := standin.BuildUserSpace(ctx, filepath.Join(dir, v2, "driver-"+m), v2, m)
			done <- result{m, u, err}
		}()
	}
	b.kit, err = standin.BuildKit(ctx, root, filepath.Join(dir, v1), v1, models...)
	var errs []error
	for range models {
		r := <-done
		b.spaces[r.model] = r.u
		errs = append(errs, r.err)
	}
	if err := errors.Join(append(errs, err)...); err != nil {
		return nil, fmt.Errorf("stand-in Ascend artefacts: %w", err)
	}
	return b, nil
}

// pushStandins pushes, at the references the chart renders, the stand-in
// driver images of the real nodes' profiles at each version, the device
// plugin and the exporter: the images containerd on the real nodes pulls.
// Process nodes pull them too and simulate them.
func (s *Story) pushStandins(ctx context.Context, versions ...string) error {
	push := func(ref string, build func() (ggcrv1.ImageIndex, error)) error {
		img, err := build()
		if err != nil {
			return err
		}
		return ociimage.Push(ctx, ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(s.Env.Registry.Keychain()))
	}
	b := s.Fleet.standins
	for i, version := range versions {
		images, err := s.renderedImages(ctx, version)
		if err != nil {
			return err
		}
		for _, n := range s.Fleet.Real {
			ds := "driver-" + n.Chip + "-real"
			if n.KernelRelease() == Kernel {
				ds = "driver-" + n.Chip
			}
			if images[ds] == "" {
				return fmt.Errorf("node %s: no DaemonSet %s in the rendered chart (%v)", n.Name(), ds, images)
			}
			if err := push(images[ds], func() (ggcrv1.ImageIndex, error) { return b.driverImage(version, n.Chips.Model) }); err != nil {
				return fmt.Errorf("node %s: %w", n.Name(), err)
			}
		}
		if i > 0 {
			continue // the vendor agents' tags do not follow the driver version
		}
		for ds, build := range map[string]func() (ggcrv1.ImageIndex, error){"device-plugin": b.kit.DevicePluginImage, "exporter": b.kit.ExporterImage} {
			if images[ds] == "" {
				return fmt.Errorf("no DaemonSet %s in the rendered chart (%v)", ds, images)
			}
			if err := push(images[ds], build); err != nil {
				return err
			}
		}
		s.workloadImage = images["device-plugin"]
	}
	return nil
}

// renderedImages maps each DaemonSet of the chart rendered at version
// (its name without the release prefix) to its first container's image.
func (s *Story) renderedImages(ctx context.Context, version string) (map[string]string, error) {
	rel, err := s.Env.Helm(s.Namespace).Render(ctx, s.Release, s.values(version))
	if err != nil {
		return nil, err
	}
	images := map[string]string{}
	for _, doc := range strings.Split(rel.Manifest, "\n---") {
		var ds appsv1.DaemonSet
		if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096).Decode(&ds); err != nil || ds.Kind != "DaemonSet" {
			continue
		}
		name := ds.Name
		for _, prefix := range []string{s.Release + "-npu-stack-", s.Release + "-"} {
			if strings.HasPrefix(name, prefix) {
				name = strings.TrimPrefix(name, prefix)
				break
			}
		}
		images[name] = ds.Spec.Template.Spec.Containers[0].Image
	}
	return images, nil
}

// installedDriver is the version the driver tree on n's disk carries
// (version.info, docs/host-contract.md).
func installedDriver(n *RealNode) (string, error) {
	b, err := os.ReadFile(n.Path(driverRoot + "/version.info"))
	if err != nil {
		return "", fmt.Errorf("node %s: %w", n.Name(), err)
	}
	v, err := host.ParseVersionInfo(b)
	if err != nil {
		return "", fmt.Errorf("node %s: %s/version.info: %w", n.Name(), driverRoot, err)
	}
	return v, nil
}

// checkReal checks what a story leaves on each real node: the driver
// tree of version installed and its modules loaded, and exactly the
// reboots the stories so far asked for (reboot.target jobs on its bus and
// boot IDs both).
func (s *Story) checkReal(version string) error {
	for _, n := range s.Fleet.Real {
		got, err := installedDriver(n)
		if err != nil {
			return err
		}
		if got != version {
			return fmt.Errorf("node %s: driver %s installed, want %s", n.Name(), got, version)
		}
		mods, err := n.LoadedModules()
		if err != nil {
			return err
		}
		if !slices.Contains(mods, "drv_pcie_host") {
			return fmt.Errorf("node %s: loaded modules %v, want the driver's drv_pcie_host among them", n.Name(), mods)
		}
		want := s.reboots[n.Name()]
		if jobs, ids := n.RebootJobs(), n.BootIDs(); jobs != want || len(ids) != want+1 {
			return fmt.Errorf("node %s: %d reboot.target jobs and boot IDs %v, want %d reboot(s)", n.Name(), jobs, ids, want)
		}
		s.printf("   ✓ %s (real node): driver %s installed, drv_pcie_host loaded, %d reboot(s) (+%s)\n", n.Name(), got, want, s.elapsed())
	}
	return nil
}
