package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BinDir is where the binary sits in every image; the chart's commands and
// the test bed's stand-in kubelet call it by this path.
const BinDir = "/usr/local/bin"

// NonRootUID is the uid and gid of the "nonroot" user the images declare,
// the same number distroless uses, so a pod's runAsUser: 65532 and a
// securityContext that checks runAsNonRoot both resolve to a named user.
const NonRootUID = 65532

// passwd and group name root and nonroot: a process that looks its user up
// (os/user reads /etc/passwd in a static binary) finds an entry instead of
// "unknown user", a runtime that resolves a user name (User: "nonroot")
// finds it, and the home directory is "/", which exists in the image.
var (
	passwd = []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
		fmt.Sprintf("nonroot:x:%d:%d:nonroot:/:/sbin/nologin\n", NonRootUID, NonRootUID))
	group = []byte("root:x:0:\n" + fmt.Sprintf("nonroot:x:%d:\n", NonRootUID))
)

// layerTar returns the uncompressed tar of the image's only layer. Every
// header is fixed by the inputs alone (mod time = created, owner 0:0, no
// user or group names, fixed modes, entries in a fixed order), so the same
// binary and time always give the same bytes, hence the same diff ID and,
// through Go's deterministic gzip, the same layer digest.
func layerTar(name string, bin []byte, created time.Time) ([]byte, error) {
	type entry struct {
		name string
		mode int64
		data []byte // nil: a directory
	}
	// Parents before children, as extractors expect; the order is part of
	// the digest, so it is spelled out rather than derived from a map.
	entries := []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: group},
		{name: "etc/passwd", mode: 0o644, data: passwd},
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
		{name: path.Join(BinDir[1:], name), mode: 0o755, data: bin},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			ModTime: created,
			// USTAR: no PAX records (atime, ctime) that could vary.
			Format: tar.FormatUSTAR,
		}
		if e.data == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// binaryLayer reads the binary at binPath and makes the gzip OCI layer
// holding it. The tar is kept in memory: the opener is called several times
// (digest, diff ID, upload), and a ~30 MiB binary per platform is small.
// gzip at the default level rather than go-containerregistry's BestSpeed:
// an 11% smaller pull on every node (9.5 against 10.6 MB for npu-rebooter)
// for about a second of build time, the compressed bytes cached so they are
// made once. The level is part of the digest, hence a constant.
func binaryLayer(name, binPath string, created time.Time) (v1.Layer, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, fmt.Errorf("binary for %s: %w", name, err)
	}
	raw, err := layerTar(name, bin, created)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
}
