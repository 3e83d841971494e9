package ociimage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// WriteLayout writes each index as an OCI image layout in dir/<name>, its
// index.json entry tagged (org.opencontainers.image.ref.name) with the
// index's version annotation, so `crane push dir/<name> ref`, `skopeo copy
// oci:dir/<name>:<version> ...` or `oras cp` can copy it to a registry
// later. An existing layout at dir/<name> is replaced, not appended to: a
// rebuild leaves no stale index or blob behind; anything else there is an
// error rather than deleted.
func WriteLayout(dir string, indexes map[string]v1.ImageIndex) error {
	for imgName, idx := range indexes {
		p := filepath.Join(dir, imgName)
		if err := clearLayout(p); err != nil {
			return err
		}
		lp, err := layout.Write(p, empty.Index)
		if err != nil {
			return fmt.Errorf("layout %s: %w", p, err)
		}
		m, err := idx.IndexManifest()
		if err != nil {
			return fmt.Errorf("layout %s: %w", p, err)
		}
		var opts []layout.Option
		if v := m.Annotations[AnnotationVersion]; v != "" {
			opts = append(opts, layout.WithAnnotations(map[string]string{AnnotationRefName: v}))
		}
		if err := lp.AppendIndex(idx, opts...); err != nil {
			return fmt.Errorf("layout %s: %w", p, err)
		}
	}
	return nil
}

// clearLayout removes p when it is an OCI layout (it has an oci-layout
// file) or is absent; any other existing path is left alone and refused.
func clearLayout(p string) error {
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if _, err := os.Stat(filepath.Join(p, "oci-layout")); err != nil {
		return fmt.Errorf("layout %s: exists and is not an OCI image layout; remove it or choose another output directory", p)
	}
	return os.RemoveAll(p)
}

// ReadLayout returns the image index WriteLayout wrote at dir (one image's
// layout, e.g. .cache/images/npu-hooks).
func ReadLayout(dir string) (v1.ImageIndex, error) {
	outer, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("read layout %s: %w", dir, err)
	}
	m, err := outer.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read layout %s: %w", dir, err)
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("read layout %s: %d entries in index.json, want 1", dir, len(m.Manifests))
	}
	return outer.ImageIndex(m.Manifests[0].Digest)
}

// Push writes the index, its images and their blobs to ref
// ("host[:port]/path/npu-hooks:tag"). The caller passes the credentials,
// normally remote.WithAuthFromKeychain(authn.DefaultKeychain), which reads
// ~/.docker/config.json (DOCKER_CONFIG) and its credential helpers.
// go-containerregistry itself speaks plain HTTP to localhost, loopback,
// RFC 1918 and *.local registries; PushPlainHTTP forces it for others.
func Push(ctx context.Context, ref string, idx v1.ImageIndex, opts ...remote.Option) error {
	return push(ctx, ref, idx, nil, opts)
}

// PushPlainHTTP is Push to a registry that serves plain HTTP at an address
// go-containerregistry would otherwise reach over HTTPS (name.Insecure).
func PushPlainHTTP(ctx context.Context, ref string, idx v1.ImageIndex, opts ...remote.Option) error {
	return push(ctx, ref, idx, []name.Option{name.Insecure}, opts)
}

func push(ctx context.Context, ref string, idx v1.ImageIndex, nameOpts []name.Option, opts []remote.Option) error {
	r, err := name.ParseReference(ref, nameOpts...)
	if err != nil {
		return fmt.Errorf("image reference %q: %w (want host[:port]/path/name:tag)", ref, err)
	}
	opts = append([]remote.Option{remote.WithContext(ctx)}, opts...)
	if err := remote.WriteIndex(r, idx, opts...); err != nil {
		return fmt.Errorf("push %s: %w (log in to %s with docker login, crane auth login or a credential helper in ~/.docker/config.json or $DOCKER_CONFIG; use --plain-http for a registry without TLS)",
			r, err, r.Context().RegistryStr())
	}
	return nil
}
