package imagefs

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// e is one tar entry: a name ending in "/" is a directory, link "->x" a
// symbolic link, "=>x" a hard link, anything else a file with that body.
type e struct{ name, body string }

func layer(t *testing.T, entries ...e) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, en := range entries {
		h := &tar.Header{Name: en.name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(en.body))}
		switch {
		case strings.HasSuffix(en.name, "/"):
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		case strings.HasPrefix(en.body, "->"):
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, en.body[2:], 0
		case strings.HasPrefix(en.body, "=>"):
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, en.body[2:], 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(en.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func image(t *testing.T, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

const run = "/usr/local/Ascend/driver.run"

var (
	runProbe  = Probe{Path: run}
	koProbe   = Probe{Path: "/usr/local/Ascend/driver/host/", Match: "*.ko"}
	verProbe  = Probe{Path: "/usr/local/Ascend/driver/version.info", Read: 64}
	base      = e{"usr/", ""}
	usrLocal  = e{"usr/local/", ""}
	ascendDir = e{"usr/local/Ascend/", ""}
)

func TestLook(t *testing.T) {
	for name, tc := range map[string]struct {
		layers func(t *testing.T) []v1.Layer
		probe  Probe
		found  bool
		want   string // in Why when not found, else in Child/Resolved/Data
	}{
		"file present": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, base, usrLocal, ascendDir, e{"usr/local/Ascend/driver.run", "#!/bin/sh"})}
		}, runProbe, true, ""},
		"file with ./ names and no parent entries": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, e{"./usr/local/Ascend/driver.run", "x"})}
		}, runProbe, true, ""},
		"file absent": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, base, usrLocal, ascendDir, e{"usr/local/Ascend/other.run", "x"})}
		}, runProbe, false, "/usr/local/Ascend/driver.run is not in the image"},
		"deleted by a later layer's whiteout": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{
				layer(t, base, usrLocal, ascendDir, e{"usr/local/Ascend/driver.run", "x"}),
				layer(t, e{"usr/local/Ascend/.wh.driver.run", ""}),
			}
		}, runProbe, false, "a later layer deletes it"},
		"parent deleted by a later layer's whiteout": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{
				layer(t, base, usrLocal, ascendDir, e{"usr/local/Ascend/driver.run", "x"}),
				layer(t, e{"usr/local/.wh.Ascend", ""}),
			}
		}, runProbe, false, "not in the image"},
		"hidden by a later layer's opaque directory": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{
				layer(t, base, usrLocal, ascendDir, e{"usr/local/Ascend/driver.run", "x"}),
				layer(t, ascendDir, e{"usr/local/Ascend/.wh..wh..opq", ""}, e{"usr/local/Ascend/README", "y"}),
			}
		}, runProbe, false, "not in the image"},
		"re-added above its whiteout": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{
				layer(t, base, usrLocal, ascendDir, e{"usr/local/Ascend/driver.run", "old"}),
				layer(t, e{"usr/local/Ascend/.wh.driver.run", ""}),
				layer(t, e{"usr/local/Ascend/driver.run", "new"}),
			}
		}, runProbe, true, ""},
		"a whiteout in a lower layer deletes nothing above it": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{
				layer(t, e{"usr/local/Ascend/.wh.driver.run", ""}),
				layer(t, base, usrLocal, ascendDir, e{"usr/local/Ascend/driver.run", "x"}),
			}
		}, runProbe, true, ""},
		"a directory where a file is wanted": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, base, usrLocal, ascendDir, e{"usr/local/Ascend/driver.run/", ""})}
		}, runProbe, true, ""},
		"relative symbolic link followed": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, base, usrLocal, ascendDir, e{"usr/local/Ascend/driver.run", "->pkg/Ascend-hdk-910b-npu-driver_25.5.0_linux-aarch64.run"},
				e{"usr/local/Ascend/pkg/", ""}, e{"usr/local/Ascend/pkg/Ascend-hdk-910b-npu-driver_25.5.0_linux-aarch64.run", "x"})}
		}, runProbe, true, "/usr/local/Ascend/pkg/Ascend-hdk-910b-npu-driver_25.5.0_linux-aarch64.run"},
		"dangling symbolic link": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, base, usrLocal, ascendDir, e{"usr/local/Ascend/driver.run", "->/opt/gone.run"})}
		}, runProbe, false, "/opt/gone.run is not in the image"},
		"parent is an absolute symbolic link": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{
				layer(t, e{"opt/", ""}, e{"opt/ascend/", ""}, e{"opt/ascend/driver.run", "x"}),
				layer(t, base, usrLocal, e{"usr/local/Ascend", "->/opt/ascend"}),
			}
		}, runProbe, true, "/opt/ascend/driver.run"},
		"parent is a file": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, base, usrLocal, e{"usr/local/Ascend", "not a dir"})}
		}, runProbe, false, "/usr/local/Ascend is a file in the image, not a directory"},
		"symbolic link loop": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, base, usrLocal, ascendDir, e{"usr/local/Ascend/driver.run", "->driver.run"})}
		}, runProbe, false, "more than 8 links"},
		"hard link followed": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, base, usrLocal, ascendDir, e{"usr/local/Ascend/a.run", "x"}, e{"usr/local/Ascend/driver.run", "=>usr/local/Ascend/a.run"})}
		}, runProbe, true, "/usr/local/Ascend/a.run"},
		"directory with a module": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, e{"usr/local/Ascend/driver/host/", ""}, e{"usr/local/Ascend/driver/host/README", "x"}, e{"usr/local/Ascend/driver/host/drv_pcie_host.ko", "x"})}
		}, koProbe, true, "/usr/local/Ascend/driver/host/drv_pcie_host.ko"},
		"directory without a module": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, e{"usr/local/Ascend/driver/host/", ""}, e{"usr/local/Ascend/driver/host/sub/", ""}, e{"usr/local/Ascend/driver/host/sub/x.ko", "x"})}
		}, koProbe, false, "/usr/local/Ascend/driver/host holds no file matching *.ko"},
		"directory without an entry of its own, without a module": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, e{"usr/local/Ascend/driver/host/README", "x"})}
		}, koProbe, false, "/usr/local/Ascend/driver/host holds no file matching *.ko"},
		"directory whose only module a later layer deletes": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{
				layer(t, e{"usr/local/Ascend/driver/host/", ""}, e{"usr/local/Ascend/driver/host/drv_pcie_host.ko", "x"}),
				layer(t, e{"usr/local/Ascend/driver/host/.wh.drv_pcie_host.ko", ""}),
			}
		}, koProbe, false, "holds no file matching *.ko"},
		"directory missing": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{layer(t, e{"usr/local/Ascend/driver/", ""})}
		}, koProbe, false, "/usr/local/Ascend/driver/host is not in the image"},
		"contents read, the top layer's": {func(t *testing.T) []v1.Layer {
			return []v1.Layer{
				layer(t, e{"usr/local/Ascend/driver/version.info", "Version=1.0\n"}),
				layer(t, e{"usr/local/Ascend/driver/version.info", "Version=25.5.0\nascendhal_version=7.35.23\n"}),
			}
		}, verProbe, true, "Version=25.5.0\n"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Look(context.Background(), image(t, tc.layers(t)...), []Probe{tc.probe})
			if err != nil {
				t.Fatal(err)
			}
			a := got[0]
			if a.Found != tc.found {
				t.Fatalf("found = %v, want %v (%+v)", a.Found, tc.found, a)
			}
			if !strings.Contains(a.Why+a.Child+a.Resolved+string(a.Data), tc.want) {
				t.Errorf("answer %+v lacks %q", a, tc.want)
			}
			if tc.found && a.Why != "" || !tc.found && a.Why == "" {
				t.Errorf("why %q with found=%v", a.Why, a.Found)
			}
		})
	}
}

func TestLookTypesAndBounds(t *testing.T) {
	img := image(t, layer(t, base, usrLocal, ascendDir, e{"usr/local/Ascend/driver.run/", ""},
		e{"usr/local/Ascend/driver/", ""}, e{"usr/local/Ascend/driver/version.info", "Version=25.5.0\n" + strings.Repeat("x", 100)}))
	got, err := Look(context.Background(), img, []Probe{runProbe, verProbe, {Path: "/usr/local/Ascend/driver/version.info"}})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Type != tar.TypeDir {
		t.Errorf("a directory at the installer's path: type %q", got[0].Type)
	}
	if !got[1].Truncated || len(got[1].Data) != 64 || !strings.HasPrefix(string(got[1].Data), "Version=25.5.0") {
		t.Errorf("read bounded to 64 bytes: %d bytes, truncated %v", len(got[1].Data), got[1].Truncated)
	}
	if got[2].Data != nil || got[2].Size != 115 {
		t.Errorf("a probe without Read reads nothing: %q, size %d", got[2].Data, got[2].Size)
	}
	if _, err := Look(context.Background(), img, []Probe{{Path: "relative"}}); err == nil {
		t.Error("a relative path must be refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Look(ctx, img, []Probe{runProbe}); err == nil {
		t.Error("a cancelled context must end the look")
	}
}

// unreadable is a layer whose contents cannot be read: Look must not
// need it.
type unreadable struct{}

var errUnread = errors.New("the lower layer was read")

func (unreadable) Digest() (v1.Hash, error) {
	return v1.NewHash("sha256:" + strings.Repeat("a", 64))
}
func (unreadable) DiffID() (v1.Hash, error) {
	return v1.NewHash("sha256:" + strings.Repeat("b", 64))
}
func (unreadable) Compressed() (io.ReadCloser, error)   { return nil, errUnread }
func (unreadable) Uncompressed() (io.ReadCloser, error) { return nil, errUnread }
func (unreadable) Size() (int64, error)                 { return 1 << 30, nil }
func (unreadable) MediaType() (types.MediaType, error)  { return types.OCILayer, nil }

// Everything asked for is in the top layer: the layers below it are never
// read (a vendor package in the top layer costs the bytes up to its
// header, not the base image). Without the early stop, Look fails here.
func TestLookStopsWhenDecided(t *testing.T) {
	img := image(t, unreadable{}, layer(t, e{"usr/local/Ascend/driver.run", "x"},
		e{"usr/local/Ascend/driver/version.info", "Version=25.5.0\n"}, e{"usr/local/Ascend/driver/host/drv_pcie_host.ko", ""}))
	got, err := Look(context.Background(), img, []Probe{runProbe, verProbe, koProbe})
	if err != nil {
		t.Fatalf("Look read further than it needed: %v", err)
	}
	for _, a := range got {
		if !a.Found {
			t.Errorf("%s not found: %s", a.Path, a.Why)
		}
	}
	// Something not in the top layer: the lower layer is read, and its
	// error is reported.
	if _, err := Look(context.Background(), img, []Probe{{Path: "/usr/local/Ascend/other.run"}}); !errors.Is(err, errUnread) {
		t.Errorf("Look of a path below the top layer = %v, want the lower layer's error", err)
	}
}

// generated is a layer whose tar is written as it is read: a big file of
// zeros, then the installer. Its digests are made up (Look never checks
// them), so nothing ever holds the whole layer.
type generated struct{ size int64 }

func (generated) Digest() (v1.Hash, error) {
	return v1.NewHash("sha256:" + strings.Repeat("c", 64))
}
func (generated) DiffID() (v1.Hash, error) {
	return v1.NewHash("sha256:" + strings.Repeat("d", 64))
}
func (g generated) Compressed() (io.ReadCloser, error) { return g.Uncompressed() }
func (g generated) Uncompressed() (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: "opt/big.bin", Mode: 0o644, Size: g.size, Typeflag: tar.TypeReg})
		if err == nil {
			_, err = io.CopyN(tw, zeros{}, g.size)
		}
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: "usr/local/Ascend/driver.run", Mode: 0o755, Typeflag: tar.TypeReg})
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr, nil
}
func (g generated) Size() (int64, error)              { return g.size, nil }
func (generated) MediaType() (types.MediaType, error) { return types.OCIUncompressedLayer, nil }

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// The layers are streamed: reading past a 256 MiB file to the installer
// allocates a small fraction of it (the hook runs within 256 MiB).
func TestLookStreams(t *testing.T) {
	const size = 256 << 20
	img := image(t, generated{size: size})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	got, err := Look(context.Background(), img, []Probe{runProbe})
	runtime.ReadMemStats(&after)
	if err != nil || !got[0].Found {
		t.Fatalf("installer behind a big file: %+v, %v", got, err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("streamed %d MiB, allocated %d KiB", size>>20, alloc>>10)
	if alloc > size/16 {
		t.Errorf("reading %d MiB of layer allocated %d MiB: the layer is not streamed", size>>20, alloc>>20)
	}
}
