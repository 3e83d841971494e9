package ociimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Image returns the image of platform ("linux/amd64", "linux/arm64") from
// idx, matching OS, architecture and, when the platform names one, variant.
func Image(idx v1.ImageIndex, platform string) (v1.Image, error) {
	want, err := parsePlatform(platform)
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.OS == want.OS && d.Platform.Architecture == want.Architecture &&
			(want.Variant == "" || d.Platform.Variant == want.Variant) {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no %s image in the index", platform)
}

// Binary returns the contents of /usr/local/bin/<name> in img, read from
// the image's flattened file system (later layers win, whiteouts apply), so
// it works on any image that ships the binary there, ours or a rebuild.
func Binary(img v1.Image, name string) ([]byte, error) {
	want := path.Join(BinDir[1:], name)
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s/%s not found in the image", BinDir, name)
		}
		if err != nil {
			return nil, fmt.Errorf("read the image's layers: %w", err)
		}
		if strings.TrimPrefix(path.Clean("/"+h.Name), "/") != want {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("%s/%s in the image is not a regular file", BinDir, name)
		}
		return io.ReadAll(tr)
	}
}
