package standin

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/openfuyao/npu-stack/internal/ociimage"
)

// TestVendorImageConfigs: the stand-in images have the upstream images'
// config where the chart depends on it (docs/host-contract.md section 5):
// the device plugin no ENTRYPOINT (so the DaemonSet must give the
// command) and its binary at /usr/local/bin/device-plugin; the exporter
// its shell-form CMD; the driver image its package at RunPath.
func TestVendorImageConfigs(t *testing.T) {
	u := buildUserSpace(t)
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plugin, err := u.DevicePluginImage(bin)
	if err != nil {
		t.Fatal(err)
	}
	exporter, err := u.ExporterImage(bin)
	if err != nil {
		t.Fatal(err)
	}
	driver, err := u.DriverImage()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		idx        v1.ImageIndex
		entrypoint []string
		cmd        []string
		binary     string
	}{
		{"device plugin", plugin, nil, []string{"/bin/bash"}, "device-plugin"},
		{"exporter", exporter, nil, []string{"/bin/sh", "-c", "/usr/local/bin/npu-exporter"}, "npu-exporter"},
		{"driver", driver, nil, []string{"/bin/bash"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img, err := ociimage.Image(tc.idx, "linux/"+runtime.GOARCH)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cf.Config.Entrypoint, tc.entrypoint) || !slices.Equal(cf.Config.Cmd, tc.cmd) {
				t.Errorf("entrypoint %q cmd %q, want %q %q", cf.Config.Entrypoint, cf.Config.Cmd, tc.entrypoint, tc.cmd)
			}
			if tc.binary != "" {
				if _, err := ociimage.Binary(img, tc.binary); err != nil {
					t.Error(err)
				}
				if _, err := ociimage.Binary(img, "dcmi-query"); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
