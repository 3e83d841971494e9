package testbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/openfuyao/npu-stack/internal/chartpkg"
	"github.com/openfuyao/npu-stack/internal/ociimage"
)

// Where the test bed publishes npu-stack in its registry: the chart's
// default repositories, so that `imageRegistry` is the only value to set.
const (
	ImageRepositoryPrefix = "openfuyao/npu-stack/"
	ChartRepositoryPath   = "openfuyao/charts"
	ChartName             = "npu-stack"
	imageSource           = "https://github.com/openfuyao/npu-stack"
)

// Product is what the test bed built from this checkout and pushed to its
// registry: what a user would pull.
type Product struct {
	// Version of the binaries: the images' tag and the chart's appVersion.
	Version string
	// ChartVersion is the packaged chart's SemVer version.
	ChartVersion string
	// Registry is the registry host every image comes from.
	Registry string
	// ChartRepo is oci://<registry>/openfuyao/charts; the chart is
	// ChartRepo + "/npu-stack" at ChartVersion.
	ChartRepo string
	// ChartArchive is the packaged chart pushed there.
	ChartArchive string
	// Images are our images' references by binary name.
	Images map[string]string
	// PauseImage is a stand-in for an ordinary workload's image, for
	// pods of tests that only need something that pulls.
	PauseImage string
}

// ChartRef is the chart's oci:// reference, as `helm install` takes it.
func (p *Product) ChartRef() string { return p.ChartRepo + "/" + ChartName }

// Publish builds the images of the binaries in binDirs (by architecture:
// one platform linux/<arch> per entry), packages the chart of this
// checkout, and pushes both to reg, with stand-ins for the vendor's
// device plugin and exporter images the chart pulls by default.
func Publish(ctx context.Context, reg *Registry, version string, binDirs map[string]string, workDir string) (*Product, error) {
	p := &Product{Version: version, Registry: reg.Host, ChartRepo: "oci://" + reg.Host + "/" + ChartRepositoryPath, Images: map[string]string{}}
	push := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(reg.Keychain())}
	created := time.Unix(0, 0).UTC()
	for _, bin := range productBinaries {
		platforms := map[string]string{}
		for arch, dir := range binDirs {
			platforms["linux/"+arch] = filepath.Join(dir, bin)
		}
		idx, err := ociimage.Build(platforms, ociimage.Options{Name: bin, Version: version, Revision: gitOutput("rev-parse", "HEAD"), Source: imageSource, User: ociimage.Users[bin], Created: created})
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", bin, err)
		}
		ref := reg.Host + "/" + ImageRepositoryPrefix + bin + ":" + version
		if err := ociimage.Push(ctx, ref, idx, push...); err != nil {
			return nil, fmt.Errorf("push %s: %w", ref, err)
		}
		p.Images[bin] = ref
	}
	chartDir, err := ChartPath()
	if err != nil {
		return nil, err
	}
	if p.ChartArchive, err = chartpkg.Package(chartDir, version, workDir); err != nil {
		return nil, err
	}
	ref, _, err := chartpkg.Push(ctx, p.ChartArchive, p.ChartRepo, chartpkg.PushOptions{PlainHTTP: true})
	if err != nil {
		return nil, err
	}
	p.ChartVersion = ref[strings.LastIndex(ref, ":")+1:]
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	p.PauseImage = reg.Host + "/library/pause:3.10"
	if err := reg.PushStandIn(ctx, p.PauseImage); err != nil {
		return nil, err
	}
	for _, key := range []string{"devicePlugin", "exporter"} {
		img, _ := ch.Values[key].(map[string]any)["image"].(map[string]any)
		ref := fmt.Sprintf("%s/%s:%s", reg.Host, img["repository"], img["tag"])
		if err := reg.PushStandIn(ctx, ref); err != nil {
			return nil, err
		}
	}
	return p, nil
}

var productBinaries = []string{"npu-hooks", "npu-rebooter", "npu-healthwatch"}

// BuildVersion is the version `make` stamps on this checkout's binaries.
func BuildVersion() string {
	if v := gitOutput("describe", "--tags", "--always", "--dirty"); v != "unknown" {
		return v
	}
	return "dev"
}

// gitOutput is what git prints for args in this checkout, as the
// Makefile's $(shell git ...) reads it; "unknown" when git cannot tell.
func gitOutput(args ...string) string {
	root, err := RepoRoot()
	if err != nil {
		return "unknown"
	}
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		return v
	}
	return "unknown"
}

// buildProductArch compiles the binaries for linux/arch into dir with
// `make build`, stamped with version, as a release builds them but with
// the build tag simhost: the agents on process nodes act on a simulated
// host, which a release build refuses (internal/host/agenthost).
// tests/release checks that the release build has no simulated host;
// npu-hooks is the same program either way.
func buildProductArch(ctx context.Context, dir, arch, version string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("product bin dir: %w", err)
	}
	unlock, err := lockProductBuild(root)
	if err != nil {
		return err
	}
	defer unlock()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "build", "BIN_DIR="+dir, "VERSION="+version, "GOTAGS=simhost")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build npu-stack binaries for linux/%s: %w\n%s", arch, err, out)
	}
	return nil
}

// lockProductBuild takes the checkout's product-build lock: `make test`
// starts several test binaries at once, and each builds the same binaries.
// One at a time, the first compiles and the others find everything in the
// Go build cache; at once, on a cold cache, each compiled all of client-go
// on the same two cores.
func lockProductBuild(root string) (unlock func(), err error) {
	dir := filepath.Join(root, ".cache")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("product build lock: %w", err)
	}
	return LockExclusive(filepath.Join(dir, "product-build.lock"))
}

// LockExclusive takes an exclusive flock on path (created if missing),
// blocking until it is free. The lock goes with the process, also when it
// is killed, so a crashed build never leaves it held.
func LockExclusive(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("build lock (flock %s): %w", path, err)
	}
	return func() { _ = f.Close() }, nil // closing releases the lock
}
