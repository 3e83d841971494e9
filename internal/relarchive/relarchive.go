// Package relarchive writes the release artefacts that are plain files:
// one tarball of npu-hooks per OS and architecture, for users who run it
// by hand without Go or a checkout, and the SHA256SUMS file over every
// artefact of a release (sha256sum -c reads it). Both are reproducible:
// fixed times, owners and order, so the same binaries give the same bytes.
package relarchive

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// epoch is every archive entry's time (the binaries carry the version).
var epoch = time.Unix(0, 0).UTC()

// ArchiveName is the tarball of binary name at version for goos/goarch:
// npu-hooks_1.2.0_linux_arm64.tar.gz.
func ArchiveName(name, version, goos, goarch string) string {
	return fmt.Sprintf("%s_%s_%s_%s.tar.gz", name, version, goos, goarch)
}

// WriteArchive writes dest, a gzipped tar holding the executable at bin
// under its base name (mode 0755, owner 0), reproducibly.
func WriteArchive(dest, bin string) (err error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("archive %s: %w", dest, err)
	}
	out, err := os.OpenFile(dest, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("archive %s: %w", dest, err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("archive %s: %w", dest, cerr)
		}
	}()
	zw := gzip.NewWriter(out) // no name, zero time: reproducible
	tw := tar.NewWriter(zw)
	h := &tar.Header{Name: filepath.Base(bin), Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("archive %s: %w", dest, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("archive %s: %w", dest, err)
	}
	if err := errors.Join(tw.Close(), zw.Close()); err != nil {
		return fmt.Errorf("archive %s: %w", dest, err)
	}
	return nil
}

// SumsFile is the checksum file's name in a release directory.
const SumsFile = "SHA256SUMS"

// WriteSums writes dir/SHA256SUMS: "<hex>  <name>" for every regular file
// of dir except itself, sorted by name (the format sha256sum prints and
// `sha256sum -c` checks).
func WriteSums(dir string) error {
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return fmt.Errorf("checksums of %s: %w", dir, err)
	}
	var lines []string
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == SumsFile || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		sum, err := fileSum(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%x  %s\n", sum, e.Name()))
	}
	if len(lines) == 0 {
		return fmt.Errorf("checksums of %s: no files", dir)
	}
	if err := os.WriteFile(filepath.Join(dir, SumsFile), []byte(strings.Join(lines, "")), 0o644); err != nil {
		return fmt.Errorf("checksums of %s: %w", dir, err)
	}
	return nil
}

func fileSum(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("checksum: %w", err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("checksum %s: %w", p, err)
	}
	return h.Sum(nil), nil
}
