package standin

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// RunPath is where the stand-in driver image keeps its package: the
// chart's default driver.installCommand runs /usr/local/Ascend/driver.run
// (docs/host-contract.md section 10).
const RunPath = "/usr/local/Ascend/driver.run"

// The vendor images' environment (Ascend/mind-cluster v7.3.0
// component/ascend-device-plugin/build/Dockerfile and
// component/npu-exporter/build/Dockerfile), and ubuntu:22.04's PATH, their
// base's.
const (
	basePATH          = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	devicePluginLDLib = "LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/driver:/usr/local/Ascend/driver/lib64/common"
	exporterLDLib     = "LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64/driver:/usr/local/Ascend/driver/lib64/common:/usr/local/Ascend/add-ons:/usr/local/Ascend/driver/lib64:/usr/local/dcmi"
)

// file is one entry of an image layer.
type file struct {
	mode int64
	body []byte
	dir  bool
}

// DriverImage is the stand-in driver image of u's model: the package at
// RunPath and nothing else (driver-entry, the chart's command, is copied
// in by the chart's init container).
func (u *UserSpace) DriverImage() (v1.ImageIndex, error) {
	tmp, err := os.MkdirTemp("", "standin-run")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	run := filepath.Join(tmp, "driver.run")
	if err := u.WriteRun(run); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(run)
	if err != nil {
		return nil, err
	}
	return image(map[string]file{RunPath[1:]: {mode: 0o755, body: b}}, v1.Config{Env: []string{basePATH}, Cmd: []string{"/bin/bash"}})
}

// DevicePluginImage is the stand-in ascend-k8sdeviceplugin:v7.3.0: no
// ENTRYPOINT and ubuntu's CMD /bin/bash (the upstream Dockerfile sets
// neither, so the DaemonSet must give the command), the binary at
// /usr/local/bin/device-plugin (550), the upstream LD_LIBRARY_PATH, bash
// and the C library (from this machine, standing for ubuntu:22.04's), the
// HwHiAiUser user (uid 1000) upstream adds, and dcmi-query.
func (u *UserSpace) DevicePluginImage(pluginBinary string) (v1.ImageIndex, error) {
	files, err := u.baseFiles("/bin/bash", "/bin/sh")
	if err != nil {
		return nil, err
	}
	if err := addFile(files, "usr/local/bin/device-plugin", pluginBinary, 0o550); err != nil {
		return nil, err
	}
	return image(files, v1.Config{Env: []string{basePATH, devicePluginLDLib}, Cmd: []string{"/bin/bash"}})
}

// ExporterImage is the stand-in npu-exporter:v7.3.0: CMD in shell form
// `CMD /usr/local/bin/npu-exporter` (as Docker records it:
// ["/bin/sh", "-c", "/usr/local/bin/npu-exporter"]), the binary at
// /usr/local/bin/npu-exporter (500), the upstream LD_LIBRARY_PATH.
func (u *UserSpace) ExporterImage(exporterBinary string) (v1.ImageIndex, error) {
	files, err := u.baseFiles("/bin/bash", "/bin/sh")
	if err != nil {
		return nil, err
	}
	if err := addFile(files, "usr/local/bin/npu-exporter", exporterBinary, 0o500); err != nil {
		return nil, err
	}
	return image(files, v1.Config{Env: []string{basePATH, exporterLDLib}, Cmd: []string{"/bin/sh", "-c", "/usr/local/bin/npu-exporter"}})
}

// baseFiles are the shells, dcmi-query, the C library they load, and
// /etc/passwd and /etc/group with root and HwHiAiUser.
func (u *UserSpace) baseFiles(shells ...string) (map[string]file, error) {
	files := map[string]file{
		"etc/passwd": {mode: 0o644, body: []byte("root:x:0:0:root:/root:/usr/sbin/nologin\nHwHiAiUser:x:1000:1000::/home/HwHiAiUser:/usr/sbin/nologin\n")},
		"etc/group":  {mode: 0o644, body: []byte("root:x:0:\nHwHiAiUser:x:1000:\n")},
		"tmp":        {mode: 0o1777, dir: true},
		"root":       {mode: 0o700, dir: true},
	}
	bins := append([]string{u.DCMIQuery()}, shells...)
	if err := addFile(files, "usr/local/bin/dcmi-query", u.DCMIQuery(), 0o555); err != nil {
		return nil, err
	}
	for _, s := range shells {
		if err := addFile(files, strings.TrimPrefix(s, "/"), s, 0o755); err != nil {
			return nil, err
		}
	}
	libs, err := sharedLibs(bins...)
	if err != nil {
		return nil, err
	}
	for _, l := range libs {
		if err := addFile(files, strings.TrimPrefix(l, "/"), l, 0o755); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// addFile puts the contents of src (symlinks followed) at name.
func addFile(files map[string]file, name, src string, mode int64) error {
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		return fmt.Errorf("stand-in image: %w", err)
	}
	b, err := os.ReadFile(real)
	if err != nil {
		return fmt.Errorf("stand-in image: %w", err)
	}
	files[name] = file{mode: mode, body: b}
	return nil
}

// sharedLibs are the libraries ldd lists for bins, the loader among them,
// at the paths the binaries ask for.
func sharedLibs(bins ...string) ([]string, error) {
	seen := map[string]bool{}
	for _, b := range bins {
		out, err := exec.Command("ldd", b).Output()
		if err != nil {
			return nil, fmt.Errorf("stand-in image: ldd %s: %w", b, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
				seen[f[2]] = true
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
				seen[f[0]] = true
			}
		}
	}
	libs := make([]string, 0, len(seen))
	for l := range seen {
		libs = append(libs, l)
	}
	sort.Strings(libs)
	return libs, nil
}

// image is a one-layer image of files with config c for this machine's
// architecture (gcc and the C library are this machine's), in an
// index as the vendors publish theirs.
func image(files map[string]file, c v1.Config) (v1.ImageIndex, error) {
	layerTar, err := tarOf(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.ConfigFile(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), &v1.ConfigFile{
		OS: "linux", Architecture: runtime.GOARCH, Config: c, RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	return mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}}), nil
}

// tarOf writes files with their parent directories (0755), sorted.
func tarOf(files map[string]file) ([]byte, error) {
	all := map[string]file{}
	for name, f := range files {
		all[name] = f
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if _, ok := files[d]; !ok {
				all[d] = file{mode: 0o755, dir: true}
			}
		}
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(0, 0)
	for _, n := range names {
		f := all[n]
		h := &tar.Header{Name: n, Mode: f.mode, ModTime: mtime, Format: tar.FormatPAX}
		switch {
		case f.dir:
			h.Typeflag, h.Name = tar.TypeDir, n+"/"
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// BuildGo builds a stand-in Go command (a package path under the
// repository root, e.g. ./tests/testbed/standin/cmd/device-plugin) as a
// static binary for this machine at out.
func BuildGo(ctx context.Context, repoRoot, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	return nil
}
