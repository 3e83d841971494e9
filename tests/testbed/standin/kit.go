package standin

import (
	"context"
	"fmt"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Kit is every stand-in a test bed needs, built once: a driver user space
// (and so a driver package) per chip model, and the device plugin and
// exporter binaries.
type Kit struct {
	Version     string
	spaces      map[string]*UserSpace
	first       *UserSpace
	pluginBin   string
	exporterBin string
	insmodBin   string
}

// BuildKit builds the stand-ins of driver version for models into dir;
// repoRoot is the repository (the Go commands' module).
func BuildKit(ctx context.Context, repoRoot, dir, version string, models ...string) (*Kit, error) {
	if len(models) == 0 {
		return nil, fmt.Errorf("stand-in kit: no chip model given")
	}
	k := &Kit{Version: version, spaces: map[string]*UserSpace{},
		pluginBin: filepath.Join(dir, "bin", "device-plugin"), exporterBin: filepath.Join(dir, "bin", "npu-exporter"),
		insmodBin: filepath.Join(dir, "bin", "insmod")}
	for _, m := range models {
		u, err := BuildUserSpace(ctx, filepath.Join(dir, "driver-"+m), version, m)
		if err != nil {
			return nil, err
		}
		k.spaces[m] = u
		if k.first == nil {
			k.first = u
		}
	}
	for bin, pkg := range map[string]string{k.pluginBin: "./tests/testbed/standin/cmd/device-plugin", k.exporterBin: "./tests/testbed/standin/cmd/npu-exporter",
		k.insmodBin: "./tests/testbed/standin/cmd/insmod"} {
		if err := BuildGo(ctx, repoRoot, pkg, bin); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// UserSpace is the driver user space of model.
func (k *Kit) UserSpace(model string) (*UserSpace, error) {
	u, ok := k.spaces[model]
	if !ok {
		return nil, fmt.Errorf("stand-in kit: no driver built for chip model %q", model)
	}
	return u, nil
}

// DriverImage is the driver image of model (DriverImage).
func (k *Kit) DriverImage(model string) (v1.ImageIndex, error) {
	u, err := k.UserSpace(model)
	if err != nil {
		return nil, err
	}
	return u.DriverImage()
}

// DevicePluginImage is the device plugin image (DevicePluginImage).
func (k *Kit) DevicePluginImage() (v1.ImageIndex, error) {
	return k.first.DevicePluginImage(k.pluginBin)
}

// ExporterImage is the exporter image (ExporterImage).
func (k *Kit) ExporterImage() (v1.ImageIndex, error) { return k.first.ExporterImage(k.exporterBin) }

// Insmod is the built stand-in insmod, for nodes with a read-only root.
func (k *Kit) Insmod() string { return k.insmodBin }

// DriverTreeImage is the tree-mode driver image of model for kernel
// (UserSpace.DriverTreeImage).
func (k *Kit) DriverTreeImage(model, kernel string, override map[string][]byte) (v1.ImageIndex, error) {
	u, err := k.UserSpace(model)
	if err != nil {
		return nil, err
	}
	return u.DriverTreeImage(kernel, override)
}
