package realnode_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/openfuyao/npu-stack/internal/ociimage"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// pushProbeImage builds writeprobe and pushes it as an image the way
// npu-stack's own are built (ociimage: one static binary, the nonroot
// user 65532 in the config) and returns its reference.
func pushProbeImage(ctx context.Context, t *testing.T) string {
	t.Helper()
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "writeprobe")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./tests/realnode/writeprobe")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build writeprobe: %v\n%s", err, out)
	}
	idx, err := ociimage.Build(map[string]string{"linux/amd64": bin}, ociimage.Options{Name: "writeprobe", Version: "test", User: fmt.Sprintf("%d:%d", ociimage.NonRootUID, ociimage.NonRootUID)})
	if err != nil {
		t.Fatal(err)
	}
	ref := env.Registry.Host + "/npu-stack-testbed/writeprobe:test"
	if err := ociimage.Push(ctx, ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(env.Registry.Keychain())); err != nil {
		t.Fatal(err)
	}
	return ref
}
