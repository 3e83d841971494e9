// Package release tests `make images` and `make chart` end to end: the
// targets a release runs, run twice, must give the same digests (docs/releasing.md:
// reproducible images and chart), and the images must hold the binaries
// `make images` built.
package release

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/internal/ociimage"
	"helm.sh/helm/v3/pkg/chart/loader"
)

const version = "test-reproducible"

// outputLine is what npu-release prints per artifact.
var outputLine = regexp.MustCompile(`(?m)^(npu-hooks|npu-rebooter|npu-healthwatch|npu-stack) (\S+) (sha256:[0-9a-f]{64})$`)

type artifact struct{ where, digest string }

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("locate the module: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// runMake runs a make target in the checkout and returns the artifacts it
// printed, by name.
func runMake(t *testing.T, root string, args ...string) map[string]artifact {
	t.Helper()
	cmd := exec.Command("make", append([]string{"VERSION=" + version}, args...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %v: %v\n%s", args, err, out)
	}
	got := map[string]artifact{}
	for _, m := range outputLine.FindAllStringSubmatch(string(out), -1) {
		got[m[1]] = artifact{where: m[2], digest: m[3]}
	}
	t.Logf("make %v:\n%s", args, out)
	return got
}

func TestMakeImagesIsReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds six binaries twice")
	}
	root, tmp := repoRoot(t), t.TempDir()
	var runs [2]map[string]artifact
	for i := range runs {
		dir := filepath.Join(tmp, string(rune('a'+i)))
		runs[i] = runMake(t, root, "images", "REGISTRY=", "RELEASE_DIR="+filepath.Join(dir, "release"), "IMAGES_OUT="+filepath.Join(dir, "images"))
	}
	for _, name := range []string{"npu-hooks", "npu-rebooter", "npu-healthwatch"} {
		a, b := runs[0][name], runs[1][name]
		if a.digest == "" || a.digest != b.digest {
			t.Errorf("%s: index digests %q and %q", name, a.digest, b.digest)
		}
		idx, err := ociimage.ReadLayout(a.where)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := idx.Digest(); err != nil || d.String() != a.digest {
			t.Errorf("%s: layout holds %v, make printed %s", name, d, a.digest)
		}
		for _, arch := range []string{"amd64", "arm64"} {
			img, err := ociimage.Image(idx, "linux/"+arch)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ociimage.Binary(img, name)
			if err != nil {
				t.Fatal(err)
			}
			built, err := os.ReadFile(filepath.Join(tmp, "a", "release", "bin", arch, name))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, built) {
				t.Errorf("%s %s: the image's binary is not the one make built", name, arch)
			}
			if bytes.Contains(got, []byte(simhostPkg+".")) {
				t.Errorf("%s %s: the image's binary holds the simulated host", name, arch)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			wantUser := map[bool]string{true: "0:0", false: "65532:65532"}[name == "npu-rebooter"]
			if cf.Config.User != wantUser || cf.Config.Labels[ociimage.AnnotationVersion] != version {
				t.Errorf("%s %s: user %q version label %q", name, arch, cf.Config.User, cf.Config.Labels[ociimage.AnnotationVersion])
			}
			if arch != runtime.GOARCH || runtime.GOOS != "linux" {
				continue
			}
			// The binary out of the image runs here and carries the version.
			exe := filepath.Join(tmp, name+"-from-image")
			if err := os.WriteFile(exe, got, 0o755); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(exe, "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), version) {
				t.Errorf("%s --version from the image: %v\n%s", name, err, out)
			}
		}
	}
}

func TestMakeChartIsReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make")
	}
	root, tmp := repoRoot(t), t.TempDir()
	var runs [2]artifact
	for i := range runs {
		runs[i] = runMake(t, root, "chart", "REGISTRY=", "CHART_OUT="+filepath.Join(tmp, string(rune('a'+i))))["npu-stack"]
	}
	if runs[0].digest == "" || runs[0].digest != runs[1].digest {
		t.Fatalf("chart digests %q and %q", runs[0].digest, runs[1].digest)
	}
	if filepath.Base(runs[0].where) != "npu-stack-0.0.0-"+version+".tgz" {
		t.Errorf("package %s", runs[0].where)
	}
	ch, err := loader.Load(runs[0].where)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != "0.0.0-"+version || ch.Metadata.AppVersion != version {
		t.Errorf("chart version %q appVersion %q", ch.Metadata.Version, ch.Metadata.AppVersion)
	}
}
