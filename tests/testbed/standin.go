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
		layer, err := crane.Layer(map[string][]byte{
			"etc/npu-stack-standin": fmt.Appendf(nil, "stand-in for %s (linux/%s)\n", ref, arch),
		})
		if err != nil {
			return nil, fmt.Errorf("stand-in layer: %w", err)
		}
		img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
		if err != nil {
			return nil, err
		}
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture = "linux", arch
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	return idx, nil
}

// PushStandIn pushes a stand-in image to ref (an image reference in this
// registry) for archs (default: StandInArchs).
func (r *Registry) PushStandIn(ctx context.Context, ref string, archs ...string) error {
	if !strings.HasPrefix(ref, r.Host+"/") {
		return fmt.Errorf("stand-in %s: not in the test-bed registry %s", ref, r.Host)
	}
	tag, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("stand-in %s: %w", ref, err)
	}
	idx, err := StandInIndex(ref, archs...)
	if err != nil {
		return err
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(r.Keychain())); err != nil {
		return fmt.Errorf("push stand-in %s: %w", ref, err)
	}
	return nil
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
