package testbed

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/openfuyao/npu-stack/internal/drivertree"
)

// StandInArchs are the platforms a stand-in image offers by default, as
// the vendors' images do (`skopeo copy --all` copies both).
var StandInArchs = []string{"amd64", "arm64"}

// StandInIndex is a small multi-arch image standing for a vendor's image
// (driver, device plugin, exporter) that the process-backed nodes never
// run: it only has to resolve in the registry as the real one would.
func StandInIndex(ref string, archs ...string) (v1.ImageIndex, error) {
	if len(archs) == 0 {
		archs = StandInArchs
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range archs {
		img, err := platformImage(arch, map[string][]byte{
			"etc/npu-stack-standin": fmt.Appendf(nil, "stand-in for %s (linux/%s)\n", ref, arch),
		})
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	return idx, nil
}

// platformImage is an OCI image for linux/arch of the given layers,
// bottom first.
func platformImage(arch string, layers ...map[string][]byte) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, files := range layers {
		layer, err := crane.Layer(files)
		if err != nil {
			return nil, fmt.Errorf("stand-in layer: %w", err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	return mutate.ConfigFile(img, cf)
}

// StandInDriver is what a stand-in driver image holds for preflight's
// reading of it (internal/preflight, drivertree.Required): the installer
// of a run-mode profile at Installer, and the installed driver tree of a
// tree-mode profile at Tree, whose version.info names Version. Either may
// be "" (not in the image). The files are stand-ins: process nodes never
// run them (the real-node stand-in driver image is standin.DriverImage).
type StandInDriver struct {
	Installer, Tree, Version string
}

// files are the image's files, relative to its root.
func (d StandInDriver) files() map[string][]byte {
	out := map[string][]byte{}
	if d.Installer != "" {
		out[strings.TrimPrefix(d.Installer, "/")] = []byte("#!/bin/sh\necho 'npu-stack test-bed stand-in driver package " + d.Version + "'\n")
	}
	if d.Tree != "" {
		t := strings.TrimPrefix(d.Tree, "/") + "/"
		out[t+drivertree.VersionFile] = []byte("Version=" + d.Version + "\n")
		out[t+drivertree.SpecificFunc] = []byte("# stand-in\n")
		out[t+drivertree.NPUSMI] = []byte("#!/bin/sh\n")
		// One module of the package (docs/host-contract.md section 1).
		out[t+drivertree.ModuleDir+"/drv_pcie_host.ko"] = nil
	}
	return out
}

// LayeredIndex is an image of the given layers, bottom first, for archs
// (default StandInArchs). A layer maps file names (relative to the image
// root) to contents; a name ending in .wh.<name> is a whiteout and
// .wh..wh..opq an opaque directory marker (OCI image-spec layer.md).
func LayeredIndex(archs []string, layers ...map[string][]byte) (v1.ImageIndex, error) {
	if len(archs) == 0 {
		archs = StandInArchs
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range archs {
		img, err := platformImage(arch, layers...)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	return idx, nil
}

// PushStandInDriver pushes a stand-in driver image holding d to ref.
func (r *Registry) PushStandInDriver(ctx context.Context, ref string, d StandInDriver, archs ...string) error {
	files := d.files()
	// Its own contents, as StandInIndex's: tags never share a digest, so
	// DeleteTag deletes only ref's.
	files["etc/npu-stack-standin"] = []byte("stand-in for " + ref + "\n")
	idx, err := LayeredIndex(archs, files)
	if err != nil {
		return err
	}
	return r.PushIndex(ctx, ref, idx)
}

// PushIndex pushes idx to ref, an image reference in this registry.
func (r *Registry) PushIndex(ctx context.Context, ref string, idx v1.ImageIndex) error {
	if !strings.HasPrefix(ref, r.Host+"/") {
		return fmt.Errorf("push %s: not in the test-bed registry %s", ref, r.Host)
	}
	tag, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(r.Keychain())); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// PushStandIn pushes a stand-in image to ref (an image reference in this
// registry) for archs (default: StandInArchs).
func (r *Registry) PushStandIn(ctx context.Context, ref string, archs ...string) error {
	idx, err := StandInIndex(ref, archs...)
	if err != nil {
		return err
	}
	return r.PushIndex(ctx, ref, idx)
}

// Has reports whether ref resolves in the registry.
func (r *Registry) Has(ctx context.Context, ref string) bool {
	tag, err := name.ParseReference(ref)
	if err != nil {
		return false
	}
	_, err = remote.Head(tag, remote.WithContext(ctx), remote.WithAuthFromKeychain(r.Keychain()))
	return err == nil
}

// DeleteTag removes ref's manifest from the registry, as an admin who
// pruned a tag would.
func (r *Registry) DeleteTag(ctx context.Context, ref string) error {
	tag, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("delete %s: %w", ref, err)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(r.Keychain())}
	desc, err := remote.Head(tag, opts...)
	if err != nil {
		return fmt.Errorf("delete %s: %w", ref, err)
	}
	if err := remote.Delete(tag.Context().Digest(desc.Digest.String()), opts...); err != nil {
		return fmt.Errorf("delete %s: %w", ref, err)
	}
	return nil
}
