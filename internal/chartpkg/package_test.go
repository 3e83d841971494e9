package chartpkg

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
)

const chartDir = "../../charts/npu-stack"

// copyTree copies the chart to a fresh directory with every mod time set
// to mtime, so a test can show that times on disk do not reach the package.
func copyTree(t *testing.T, src string, mtime time.Time) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "npu-stack")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(target, b, 0o644); err != nil {
			return err
		}
		return os.Chtimes(target, mtime, mtime)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestPackageIsReproducible(t *testing.T) {
	a, err := Package(copyTree(t, chartDir, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)), "ebb4ef3-dirty", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // Helm's time.Now() stamps would differ by now
	b, err := Package(copyTree(t, chartDir, time.Now()), "ebb4ef3-dirty", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(a) != "npu-stack-0.0.0-ebb4ef3-dirty.tgz" {
		t.Errorf("package name %s", filepath.Base(a))
	}
	ba, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if len(ba) == 0 || !bytes.Equal(ba, bb) {
		t.Fatalf("two packages of the same tree differ (%d and %d bytes)", len(ba), len(bb))
	}

	ch, err := loader.Load(a)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != "0.0.0-ebb4ef3-dirty" || ch.Metadata.AppVersion != "ebb4ef3-dirty" {
		t.Errorf("version %q appVersion %q", ch.Metadata.Version, ch.Metadata.AppVersion)
	}
	if len(ch.Templates) == 0 || ch.Schema == nil {
		t.Errorf("package lost templates (%d) or the schema", len(ch.Templates))
	}

	zr, err := gzip.NewReader(bytes.NewReader(ba))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() {
		t.Errorf("gzip header time %s", zr.ModTime)
	}
	tr := tar.NewReader(zr)
	n := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if h.ModTime.Unix() != 0 || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %s uid %d gid %d uname %q gname %q", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
		}
	}
	if n < 5 {
		t.Errorf("%d entries in the package", n)
	}

	c, err := Package(chartDir, "v0.3.0", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(c) != "npu-stack-0.3.0.tgz" {
		t.Errorf("package name %s", filepath.Base(c))
	}
	if bc, _ := os.ReadFile(c); bytes.Equal(bc, ba) {
		t.Error("another version gave the same bytes")
	}
}

func TestPackageRejects(t *testing.T) {
	if _, err := Package(chartDir, "", t.TempDir()); err == nil {
		t.Error("empty version accepted")
	}
	if _, err := Package(t.TempDir(), "v1.0.0", t.TempDir()); err == nil {
		t.Error("a directory without Chart.yaml was packaged")
	}
}
