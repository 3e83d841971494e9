package chartpkg

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// entryTime is the mod time of every file in the package. Helm v3's
// chartutil.Save stamps each tar entry with time.Now() (and chart.File has
// no ModTime to set), so two `helm package` runs of the same tree differ;
// its entry order is deterministic (Chart.yaml, values, schema, templates
// and files in the loader's lexical walk order, dependencies last). Package
// keeps Helm's archive and only rewrites the times, so the same tree and
// version always give the same bytes, hence the same OCI chart digest.
var entryTime = time.Unix(0, 0).UTC()

// Package loads the chart at chartDir, sets its version to
// ChartVersion(version) and its appVersion to version, and writes
// destDir/<name>-<chart version>.tgz reproducibly. It returns that path.
func Package(chartDir, version, destDir string) (string, error) {
	return PackageFor(chartDir, version, "", destDir)
}

// PackageFor is Package for a release whose images live in imagesRepo
// (host[:port][/path], the images being imagesRepo/<binary>:<version>):
// the packaged chart's default images point there. Empty imagesRepo keeps
// the chart's defaults.
func PackageFor(chartDir, version, imagesRepo, destDir string) (string, error) {
	if version == "" {
		return "", errors.New("chart package: empty version")
	}
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		return "", fmt.Errorf("load chart %s: %w", chartDir, err)
	}
	if imagesRepo != "" {
		if err := setImagesRepo(ch, imagesRepo); err != nil {
			return "", fmt.Errorf("package chart %s: %w", chartDir, err)
		}
	}
	ch.Metadata.Version = ChartVersion(version)
	ch.Metadata.AppVersion = version
	if err := os.MkdirAll(destDir, 0o755); err != nil {
		return "", fmt.Errorf("chart package: %w", err)
	}
	// Helm writes into a scratch directory beside the result; the
	// normalized archive is renamed into place, so a reader never sees a
	// half-written .tgz.
	tmp, err := os.MkdirTemp(destDir, ".package-")
	if err != nil {
		return "", fmt.Errorf("chart package: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	saved, err := chartutil.Save(ch, tmp)
	if err != nil {
		return "", fmt.Errorf("package chart %s: %w", chartDir, err)
	}
	normalized := filepath.Join(tmp, "normalized.tgz")
	if err := normalize(saved, normalized); err != nil {
		return "", fmt.Errorf("package chart %s: %w", chartDir, err)
	}
	out := filepath.Join(destDir, filepath.Base(saved))
	if err := os.Rename(normalized, out); err != nil {
		return "", fmt.Errorf("chart package: %w", err)
	}
	return out, nil
}

// normalize copies the gzipped tar at src to dst with every entry's times
// set to entryTime, owner 0 without names, and no gzip time stamp; names,
// modes, contents and order are Helm's.
func normalize(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	zr, err := gzip.NewReader(in)
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	zw := gzip.NewWriter(out)
	// Helm's header marks (comment "Helm" and its Extra field) are kept;
	// only the time goes.
	zw.Header = zr.Header
	zw.ModTime = time.Time{}
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		h.ModTime, h.AccessTime, h.ChangeTime = entryTime, time.Time{}, time.Time{}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		// Let the writer pick USTAR, or PAX only for a long name: no
		// records carried over from Helm's header.
		h.Format, h.PAXRecords = tar.FormatUnknown, nil
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}
