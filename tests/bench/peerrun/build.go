// Package peerrun measures the peer npu-stack's rollout is compared
// with: NVIDIA's driver upgrade library driven as GPU Operator drives it
// (the npu-peer binary of the tests/bench/peer module), on the same KWOK
// fleet, through the same counting proxy. It builds the binary, installs
// the peer's DaemonSets (a driver DaemonSet with the OnDelete strategy
// and a validator), plays the node side of a driver restart, and runs
// one upgrade from the version bump to every node upgrade-done.
package peerrun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// peerModule is the peer's own Go module, relative to the repository: its
// dependencies (the library, controller-runtime and the Kubernetes
// version they need) never enter npu-stack's go.mod.
const peerModule = "tests/bench/peer"

// Binary returns the path of npu-peer, built once into
// <repo>/.cache/peer/bin and rebuilt only when the peer module's sources,
// go.sum or the Go toolchain change (the stamp next to it records what it
// was built from). Concurrent callers (a test and `make bench`) build it
// once: the build holds a lock file.
func Binary(ctx context.Context) (string, error) {
	root, err := testbed.RepoRoot()
	if err != nil {
		return "", err
	}
	src := filepath.Join(root, peerModule)
	dir := filepath.Join(root, ".cache", "peer")
	bin := filepath.Join(dir, "bin", "npu-peer")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", fmt.Errorf("peer build dir: %w", err)
	}
	unlock, err := testbed.LockExclusive(filepath.Join(dir, "lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	want, err := stamp(ctx, src)
	if err != nil {
		return "", err
	}
	stampPath := filepath.Join(dir, "stamp")
	if got, err := os.ReadFile(stampPath); err == nil && string(got) == want {
		if _, err := os.Stat(bin); err == nil {
			return bin, nil
		}
	}
	tmp := bin + ".tmp"
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", tmp, "./cmd/npu-peer")
	cmd.Dir = src
	// Its own module, whatever go.work the caller has.
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the peer (go build in %s): %w\n%s", src, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("install the peer binary: %w", err)
	}
	if err := os.WriteFile(stampPath, []byte(want), 0o644); err != nil {
		return "", fmt.Errorf("write the peer stamp: %w", err)
	}
	return bin, nil
}

// libraryModule is the peer's library.
const libraryModule = "github.com/NVIDIA/k8s-operator-libs"

// Library names the library and the version the peer module pins.
func Library() (string, error) {
	root, err := testbed.RepoRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, peerModule, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("read the peer's go.mod: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == libraryModule {
			return f[0] + " " + f[1], nil
		}
	}
	return "", fmt.Errorf("the peer's go.mod does not require %s", libraryModule)
}

// stamp names what the binary is built from: the Go toolchain and every
// Go source, go.mod and go.sum of the peer module.
func stamp(ctx context.Context, src string) (string, error) {
	ver, err := exec.CommandContext(ctx, "go", "version").Output()
	if err != nil {
		return "", fmt.Errorf("go version: %w", err)
	}
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "%s %s/%s\n", strings.TrimSpace(string(ver)), runtime.GOOS, runtime.GOARCH)
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := d.Name()
		if !strings.HasSuffix(name, ".go") && name != "go.mod" && name != "go.sum" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		_, _ = fmt.Fprintf(h, "%s %d\n", rel, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash the peer module %s: %w", src, err)
	}
	return hex.EncodeToString(h.Sum(nil)) + "\n", nil
}
