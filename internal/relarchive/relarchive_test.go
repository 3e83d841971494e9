package relarchive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestArchiveIsReproducibleAndChecksummed(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "npu-hooks")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	dist := filepath.Join(dir, "dist")
	if err := os.Mkdir(dist, 0o755); err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(dist, ArchiveName("npu-hooks", "1.2.0", "linux", "arm64"))
	if filepath.Base(a) != "npu-hooks_1.2.0_linux_arm64.tar.gz" {
		t.Errorf("name %s", filepath.Base(a))
	}
	if err := WriteArchive(a, bin); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(a)
	if err := os.Chtimes(bin, epoch.AddDate(10, 0, 0), epoch.AddDate(10, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(a, bin); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(a)
	if !bytes.Equal(first, second) {
		t.Error("two archives of the same binary differ")
	}
	zr, err := gzip.NewReader(bytes.NewReader(second))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(tr)
	if h.Name != "npu-hooks" || h.Mode != 0o755 || string(body) != "#!/bin/true\n" {
		t.Errorf("entry %s mode %o body %q", h.Name, h.Mode, body)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("more than one entry: %v", err)
	}

	if err := os.WriteFile(filepath.Join(dist, "npu-stack-1.2.0.tgz"), []byte("chart"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteSums(dist); err != nil {
		t.Fatal(err)
	}
	sums, _ := os.ReadFile(filepath.Join(dist, SumsFile))
	if n := bytes.Count(sums, []byte("\n")); n != 2 {
		t.Errorf("SHA256SUMS has %d lines:\n%s", n, sums)
	}
	if _, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command("sha256sum", "-c", SumsFile)
		cmd.Dir = dist
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c: %v\n%s", err, out)
		}
		if err := os.WriteFile(filepath.Join(dist, "npu-stack-1.2.0.tgz"), []byte("tampered"), 0o644); err != nil {
			t.Fatal(err)
		}
		again := exec.Command("sha256sum", "-c", SumsFile)
		again.Dir = dist
		if out, err := again.Output(); err == nil {
			t.Errorf("sha256sum -c accepted a changed file:\n%s", out)
		}
	}
}
