package ociimage

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func testIndex(t *testing.T) v1.ImageIndex {
	t.Helper()
	idx, err := Build(fakeBins(t, t.TempDir(), map[string]string{"linux/amd64": "amd64 bytes", "linux/arm64": "arm64 bytes"}), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestWriteLayoutReadBack(t *testing.T) {
	idx := testIndex(t)
	want, _ := digests(t, idx)
	dir := t.TempDir()
	for range 2 { // a second write replaces the first
		if err := WriteLayout(dir, map[string]v1.ImageIndex{"npu-hooks": idx}); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "npu-hooks", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top v1.IndexManifest
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].Annotations[AnnotationRefName] != "v0.3.0" || top.Manifests[0].Digest.String() != want {
		t.Fatalf("index.json %s: want one entry %s tagged v0.3.0", raw, want)
	}
	back, err := ReadLayout(filepath.Join(dir, "npu-hooks"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := digests(t, back); got != want {
		t.Errorf("layout index %s, built %s", got, want)
	}
	img, err := Image(back, "linux/arm64")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := Binary(img, "npu-hooks"); err != nil || string(b) != "arm64 bytes" {
		t.Errorf("binary from the layout: %q, %v", b, err)
	}

	// Anything but a layout in the way is refused, not deleted.
	if err := os.MkdirAll(filepath.Join(dir, "npu-rebooter"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteLayout(dir, map[string]v1.ImageIndex{"npu-rebooter": idx}); err == nil || !strings.Contains(err.Error(), "not an OCI image layout") {
		t.Errorf("WriteLayout over a plain directory: %v", err)
	}
}

// memRegistry is go-containerregistry's in-memory registry on loopback
// HTTP, which go-containerregistry reaches without TLS by itself.
func memRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestPush(t *testing.T) {
	idx := testIndex(t)
	want, wantPer := digests(t, idx)
	host := memRegistry(t)
	for _, push := range []func(context.Context, string, v1.ImageIndex, ...remote.Option) error{Push, PushPlainHTTP} {
		ref := host + "/openfuyao/npu-stack/npu-hooks:v0.3.0"
		if err := push(context.Background(), ref, idx); err != nil {
			t.Fatal(err)
		}
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		pulled, err := remote.Index(r)
		if err != nil {
			t.Fatal(err)
		}
		got, gotPer := digests(t, pulled)
		if got != want || len(gotPer) != 2 || gotPer["linux/arm64/v8"] != wantPer["linux/arm64/v8"] {
			t.Errorf("pulled %s %v, pushed %s %v", got, gotPer, want, wantPer)
		}
		img, err := remote.Image(r, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "arm64"}))
		if err != nil {
			t.Fatal(err)
		}
		if b, err := Binary(img, "npu-hooks"); err != nil || string(b) != "arm64 bytes" {
			t.Errorf("binary from the registry: %q, %v", b, err)
		}
	}
}

func TestPushErrorNamesReference(t *testing.T) {
	host := memRegistry(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ref := host + "/openfuyao/npu-hooks:v1"
	err := Push(ctx, ref, testIndex(t))
	if err == nil || !strings.Contains(err.Error(), ref) || !strings.Contains(err.Error(), "--plain-http") {
		t.Errorf("error %v: want the reference and the fix", err)
	}
	if err := Push(context.Background(), "Not A Reference", testIndex(t)); err == nil || !strings.Contains(err.Error(), "host[:port]/path/name:tag") {
		t.Errorf("bad reference: %v", err)
	}
}
