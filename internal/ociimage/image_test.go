package ociimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fakeBins writes one stand-in binary per platform and returns Build's map.
func fakeBins(t *testing.T, dir string, content map[string]string) map[string]string {
	t.Helper()
	bins := map[string]string{}
	for plat, c := range content {
		p := filepath.Join(dir, strings.ReplaceAll(plat, "/", "-"))
		if err := os.WriteFile(p, []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
		bins[plat] = p
	}
	return bins
}

var testOpts = Options{
	Name: "npu-hooks", Version: "v0.3.0", Revision: "0123456789abcdef",
	Source: "https://github.com/openfuyao/npu-stack", User: "65532:65532",
}

// digests is the index digest and each platform's image digest.
func digests(t *testing.T, idx v1.ImageIndex) (string, map[string]string) {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]string{}
	for _, desc := range m.Manifests {
		per[desc.Platform.String()] = desc.Digest.String()
	}
	return d.String(), per
}

func TestBuildIsReproducible(t *testing.T) {
	content := map[string]string{"linux/amd64": "amd64 binary", "linux/arm64": "arm64 binary"}
	build := func() (string, map[string]string) {
		// A fresh directory each time: file paths and mod times must not matter.
		idx, err := Build(fakeBins(t, t.TempDir(), content), testOpts)
		if err != nil {
			t.Fatal(err)
		}
		return digests(t, idx)
	}
	d1, per1 := build()
	time.Sleep(1100 * time.Millisecond) // a clock leak into a timestamp would show
	d2, per2 := build()
	if d1 != d2 {
		t.Errorf("same inputs, index digests %s and %s", d1, d2)
	}
	for plat, d := range per1 {
		if per2[plat] != d {
			t.Errorf("%s: image digests %s and %s", plat, d, per2[plat])
		}
	}

	content["linux/arm64"] = "arm64 binary, rebuilt"
	d3, per3 := build()
	if d3 == d1 {
		t.Error("a changed binary kept the index digest")
	}
	if per3["linux/arm64/v8"] == per1["linux/arm64/v8"] {
		t.Error("a changed arm64 binary kept the arm64 image digest")
	}
	if per3["linux/amd64"] != per1["linux/amd64"] {
		t.Error("a changed arm64 binary changed the amd64 image digest")
	}

	opts := testOpts
	opts.Version = "v0.3.1"
	idx, err := Build(fakeBins(t, t.TempDir(), content), opts)
	if err != nil {
		t.Fatal(err)
	}
	if d4, _ := digests(t, idx); d4 == d3 {
		t.Error("a changed version (annotations, labels) kept the index digest")
	}
}

func TestBuildImageContents(t *testing.T) {
	created := time.Date(2026, 3, 1, 12, 30, 45, 0, time.UTC)
	opts := testOpts
	opts.Created = created.Add(300 * time.Millisecond) // fractions are dropped
	idx, err := Build(fakeBins(t, t.TempDir(), map[string]string{"linux/amd64": "a", "linux/arm64": "b"}), opts)
	if err != nil {
		t.Fatal(err)
	}
	wantAnn := map[string]string{
		AnnotationSource: opts.Source, AnnotationRevision: opts.Revision, AnnotationVersion: opts.Version,
		AnnotationTitle: "npu-hooks", AnnotationCreated: "2026-03-01T12:30:45Z",
	}
	checkAnn := func(what string, got map[string]string) {
		t.Helper()
		for k, v := range wantAnn {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", what, k, got[k], v)
			}
		}
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s", im.MediaType)
	}
	checkAnn("index", im.Annotations)
	if len(im.Manifests) != 2 {
		t.Fatalf("%d manifests, want 2", len(im.Manifests))
	}
	plats := map[string]bool{}
	for _, d := range im.Manifests {
		plats[d.Platform.String()] = true
		if d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("%s: descriptor media type %s", d.Platform, d.MediaType)
		}
	}
	if !plats["linux/amd64"] || !plats["linux/arm64/v8"] {
		t.Errorf("platforms %v, want linux/amd64 and linux/arm64/v8", plats)
	}

	for _, plat := range []string{"linux/amd64", "linux/arm64"} {
		img, err := Image(idx, plat)
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
			t.Errorf("%s: manifest %s, config %s", plat, m.MediaType, m.Config.MediaType)
		}
		if len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
			t.Errorf("%s: layers %+v, want one %s", plat, m.Layers, types.OCILayer)
		}
		checkAnn(plat+" manifest", m.Annotations)
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		checkAnn(plat+" labels", cf.Config.Labels)
		wantArch, wantVariant := strings.TrimPrefix(plat, "linux/"), ""
		if wantArch == "arm64" {
			wantVariant = "v8"
		}
		if cf.OS != "linux" || cf.Architecture != wantArch || cf.Variant != wantVariant {
			t.Errorf("%s: config platform %s/%s/%s", plat, cf.OS, cf.Architecture, cf.Variant)
		}
		if got := strings.Join(cf.Config.Entrypoint, " "); got != "/usr/local/bin/npu-hooks" {
			t.Errorf("%s: entrypoint %q", plat, got)
		}
		if cf.Config.User != "65532:65532" {
			t.Errorf("%s: user %q", plat, cf.Config.User)
		}
		if got := strings.Join(cf.Config.Env, " "); got != "PATH=/usr/local/bin" {
			t.Errorf("%s: env %q", plat, got)
		}
		if !cf.Created.Equal(created) {
			t.Errorf("%s: created %s, want %s", plat, cf.Created.Time, created)
		}
		checkLayer(t, img, "npu-hooks", created)
	}
}

// checkLayer asserts every tar header is fixed: mod time, owner, modes.
func checkLayer(t *testing.T, img v1.Image, name string, created time.Time) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	wantMode := map[string]int64{
		"etc/": 0o755, "etc/group": 0o644, "etc/passwd": 0o644, "usr/": 0o755,
		"usr/local/": 0o755, "usr/local/bin/": 0o755, "usr/local/bin/" + name: 0o755,
	}
	seen := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen++
		mode, ok := wantMode[h.Name]
		if !ok {
			t.Errorf("unexpected entry %s", h.Name)
			continue
		}
		if h.Mode != mode || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(created) {
			t.Errorf("%s: mode %o uid %d gid %d uname %q gname %q mtime %s", h.Name, h.Mode, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
		if h.Name == "etc/passwd" || h.Name == "etc/group" {
			b, _ := io.ReadAll(tr)
			if !bytes.Contains(b, []byte("nonroot:x:65532:")) {
				t.Errorf("%s has no nonroot 65532 entry:\n%s", h.Name, b)
			}
		}
	}
	if seen != len(wantMode) {
		t.Errorf("%d entries, want %d", seen, len(wantMode))
	}
}

func TestCreatedDefaultsToEpoch(t *testing.T) {
	idx, err := Build(fakeBins(t, t.TempDir(), map[string]string{"linux/amd64": "a"}), Options{Name: "npu-rebooter", User: "0:0"})
	if err != nil {
		t.Fatal(err)
	}
	img, err := Image(idx, "linux/amd64")
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Created.Unix() != 0 || cf.Config.User != "0:0" {
		t.Errorf("created %s user %q, want the epoch and 0:0", cf.Created.Time, cf.Config.User)
	}
	if got := cf.Config.Labels[AnnotationCreated]; got != "1970-01-01T00:00:00Z" {
		t.Errorf("created annotation %q", got)
	}
	if _, ok := cf.Config.Labels[AnnotationRevision]; ok {
		t.Error("an empty revision was written as a label")
	}
	checkLayer(t, img, "npu-rebooter", time.Unix(0, 0))
}

func TestBuildRejects(t *testing.T) {
	bins := fakeBins(t, t.TempDir(), map[string]string{"linux/amd64": "a"})
	for name, tc := range map[string]struct {
		bins map[string]string
		opts Options
	}{
		"no name":        {bins, Options{}},
		"no binaries":    {nil, testOpts},
		"bad platform":   {map[string]string{"amd64": bins["linux/amd64"]}, testOpts},
		"missing binary": {map[string]string{"linux/amd64": "/nonexistent/npu-hooks"}, testOpts},
	} {
		if _, err := Build(tc.bins, tc.opts); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestBinaryRoundTrip(t *testing.T) {
	idx, err := Build(fakeBins(t, t.TempDir(), map[string]string{"linux/amd64": "amd64 bytes", "linux/arm64": "arm64 bytes"}), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	for plat, want := range map[string]string{"linux/amd64": "amd64 bytes", "linux/arm64": "arm64 bytes", "linux/arm64/v8": "arm64 bytes"} {
		img, err := Image(idx, plat)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Binary(img, "npu-hooks")
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s: binary %q, want %q", plat, got, want)
		}
	}
	img, _ := Image(idx, "linux/amd64")
	if _, err := Binary(img, "npu-rebooter"); err == nil {
		t.Error("a binary the image lacks was found")
	}
	if _, err := Image(idx, "linux/s390x"); err == nil {
		t.Error("a platform the index lacks was found")
	}
}
