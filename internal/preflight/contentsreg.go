package preflight

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/openfuyao/npu-stack/internal/imagefs"
)

// ContentChecker reads what an image holds at probes' paths, for each
// platform ("linux/<arch>") of archs, or for every linux platform the
// image offers when archs is empty.
type ContentChecker interface {
	Contents(ctx context.Context, image string, archs []string, probes []imagefs.Probe) (map[string][]imagefs.Answer, error)
}

// DefaultContentTimeout bounds the reading of one image's layers.
const DefaultContentTimeout = 3 * time.Minute

// ErrContentTimeout is a layer read that did not finish in time.
var ErrContentTimeout = errors.New("reading the image's layers took too long")

// Contents streams the layers of each platform's image from the registry
// (imagefs.Look: tar headers only, top layer first, stopping once every
// probe is decided), within ContentTimeout for the whole image.
func (r Registry) Contents(ctx context.Context, image string, archs []string, probes []imagefs.Probe) (map[string][]imagefs.Answer, error) {
	ref, kc, err := r.reference(image)
	if err != nil {
		return nil, err
	}
	timeout := r.ContentTimeout
	if timeout <= 0 {
		timeout = DefaultContentTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	desc, err := remote.Get(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(kc))
	if err != nil {
		return nil, registryError(ctx, ref, timeout, err)
	}
	imgs, err := platformImages(desc, archs)
	if err != nil {
		return nil, fmt.Errorf("read the manifest of %s: %w", image, err)
	}
	out := map[string][]imagefs.Answer{}
	seen := map[v1.Hash][]imagefs.Answer{} // platforms sharing one image
	for _, platform := range slices.Sorted(maps.Keys(imgs)) {
		img := imgs[platform]
		d, err := img.Digest()
		if err != nil {
			return nil, fmt.Errorf("image %s (%s): %w", image, platform, err)
		}
		if ans, ok := seen[d]; ok {
			out[platform] = ans
			continue
		}
		ans, err := imagefs.Look(ctx, img, probes)
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("%w: the layers of %s (%s) were not read within %s: %w", ErrContentTimeout, image, platform, timeout, err)
			}
			return nil, fmt.Errorf("read the layers of %s (%s) from registry %s: %w", image, platform, ref.Context().RegistryStr(), err)
		}
		out[platform], seen[d] = ans, ans
	}
	return out, nil
}

// reference parses image with r's options and returns it with r's keychain.
func (r Registry) reference(image string) (name.Reference, authn.Keychain, error) {
	var opts []name.Option
	if r.Insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(image, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid image reference: %w", err)
	}
	kc := r.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	return ref, kc, nil
}

// platformImages are the images of desc by platform: for an index, those
// of archs (every linux entry when archs is empty); a single image is its
// own config's platform.
func platformImages(desc *remote.Descriptor, archs []string) (map[string]v1.Image, error) {
	out := map[string]v1.Image{}
	if !desc.MediaType.IsIndex() {
		img, err := desc.Image()
		if err != nil {
			return nil, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		out["linux/"+cf.Architecture] = img
		return out, nil
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, err
	}
	if len(archs) == 0 {
		if archs, err = platforms(desc); err != nil {
			return nil, err
		}
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, a := range archs {
		d, ok := platformEntry(m, a)
		if !ok {
			return nil, fmt.Errorf("no linux/%s image in the index", a)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		out["linux/"+a] = img
	}
	return out, nil
}

// platformEntry is the entry of m a linux/arch node pulls: for arm64 the
// v8 variant or one that names none (containerd's platform matcher
// normalises arm64 to arm64/v8), else the first of its architecture.
func platformEntry(m *v1.IndexManifest, arch string) (v1.Descriptor, bool) {
	var first *v1.Descriptor
	for i, d := range m.Manifests {
		p := d.Platform
		if p == nil || p.OS != "linux" || p.Architecture != arch {
			continue
		}
		if arch != "arm64" || p.Variant == "" || p.Variant == "v8" {
			return d, true
		}
		if first == nil {
			first = &m.Manifests[i]
		}
	}
	if first != nil {
		return *first, true
	}
	return v1.Descriptor{}, false
}
