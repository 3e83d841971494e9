package release

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/releaseutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/openfuyao/npu-stack/internal/chartpkg"
	"github.com/openfuyao/npu-stack/internal/relarchive"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// chartYAMLVersion is the version charts/npu-stack/Chart.yaml carries:
// the only version make release builds (a SemVer release, which helm
// installs without --devel).
func chartYAMLVersion(t *testing.T) string {
	t.Helper()
	ch, err := loader.LoadDir(filepath.Join(repoRoot(t), "charts", "npu-stack"))
	if err != nil {
		t.Fatal(err)
	}
	return ch.Metadata.Version
}

// TestReleaseInstallsItsOwnImages runs `make release VERSION=<Chart.yaml's
// version> REGISTRY=<test-bed registry>/openfuyao`, then, as a user would:
//   - the chart in the registry has that version and appVersion;
//   - rendered with no value set, every npu-stack image it names is one
//     `make images` pushed in that run, and the registry resolves each
//     reference to the digest make printed;
//   - installed from the registry with no value set on a node that pulls
//     from the registry, its hook Jobs run npu-hooks from that image;
//   - the release directory holds the chart and one npu-hooks tarball per
//     OS/arch, SHA256SUMS covers them, and the tarball's npu-hooks is that
//     version.
func TestReleaseInstallsItsOwnImages(t *testing.T) {
	testbed.NeedEnv(t, env)
	releaseVersion := chartYAMLVersion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	root, tmp := repoRoot(t), t.TempDir()
	prefix := env.Registry.Host + "/openfuyao"
	cmd := exec.CommandContext(ctx, "make", "release", "VERSION="+releaseVersion, "REGISTRY="+prefix,
		"RELEASE_DIR="+filepath.Join(tmp, "release"), "DIST="+filepath.Join(tmp, "dist"))
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	made := map[string]artifact{}
	for _, m := range outputLine.FindAllStringSubmatch(string(out), -1) {
		if strings.HasPrefix(m[2], env.Registry.Host) {
			made[m[1]] = artifact{where: m[2], digest: m[3]}
		}
	}

	// The images make pushed, by reference, and what the registry says.
	want := map[string]string{} // reference → digest
	for _, bin := range []string{"npu-hooks", "npu-rebooter", "npu-healthwatch"} {
		a := made[bin]
		if a.where != prefix+"/npu-stack/"+bin+":"+releaseVersion {
			t.Fatalf("make release pushed %s to %q\n%s", bin, a.where, out)
		}
		ref, err := name.ParseReference(a.where)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := remote.Head(ref, remote.WithContext(ctx))
		if err != nil {
			t.Fatalf("%s in the registry: %v", a.where, err)
		}
		if desc.Digest.String() != a.digest {
			t.Errorf("%s: registry has %s, make printed %s", a.where, desc.Digest, a.digest)
		}
		want[a.where] = a.digest
	}

	// The chart, pulled as `helm install oci://... --version 9.8.7` does.
	rc, err := registry.NewClient(registry.ClientOptPlainHTTP())
	if err != nil {
		t.Fatal(err)
	}
	chartRef := prefix + "/charts/npu-stack:" + releaseVersion
	res, err := rc.Pull(chartRef, registry.PullOptWithChart(true))
	if err != nil {
		t.Fatalf("pull %s: %v\n%s", chartRef, err, out)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(res.Chart.Data))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != releaseVersion || ch.Metadata.AppVersion != releaseVersion {
		t.Errorf("chart version %q appVersion %q", ch.Metadata.Version, ch.Metadata.AppVersion)
	}

	// Rendered with no value set: our images are exactly make's.
	tmpl := action.NewInstall(&action.Configuration{})
	tmpl.DryRun, tmpl.ClientOnly, tmpl.Replace = true, true, true
	tmpl.ReleaseName, tmpl.Namespace = "npu-stack", "npu-operator"
	tmpl.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.1", Major: "1", Minor: "37"} // helm template's default is 1.20
	rendered, err := tmpl.RunWithContext(ctx, ch, nil)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	manifests := rendered.Manifest
	for _, h := range rendered.Hooks {
		manifests += "\n---\n" + h.Manifest
	}
	seen := map[string]bool{}
	for _, img := range ourImages(t, manifests) {
		if _, ok := want[img]; !ok {
			t.Errorf("the chart renders %s, which make release did not push", img)
		}
		seen[img] = true
	}
	for ref := range want {
		if !seen[ref] {
			t.Errorf("the chart never renders %s", ref)
		}
	}

	// Installed with no value set: the hook Jobs run on a node pulling
	// from the registry (process nodes pull each image by its reference
	// and run the binary out of its layer).
	if _, err := env.AddProcessNodes(ctx, 1, testbed.NodeSpec{Prefix: "cpu", CPU: true}); err != nil {
		t.Fatal(err)
	}
	h := env.Helm("npu-operator")
	cfg, err := h.Config(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace, inst.Timeout = "npu-stack", "npu-operator", true, 5*time.Minute
	if _, err := inst.RunWithContext(ctx, ch, nil); err != nil {
		t.Fatalf("helm install %s with no values: %v", chartRef, err)
	}
	t.Cleanup(func() { _ = h.Uninstall("npu-stack") })
	pods, err := env.Client.CoreV1().Pods("npu-operator").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded {
			continue
		}
		for _, c := range p.Status.ContainerStatuses {
			if _, ok := want[c.Image]; !ok {
				t.Errorf("pod %s ran %s, not an image of the release", p.Name, c.Image)
			}
			if c.State.Terminated == nil || c.State.Terminated.ExitCode != 0 {
				t.Errorf("pod %s container %s: %+v", p.Name, c.Name, c.State)
			}
			ran++
		}
	}
	if ran < 2 { // preflight and rollout
		t.Errorf("%d hook containers ran from the release's images; want preflight and rollout", ran)
	}

	// The files of the release.
	dist := filepath.Join(tmp, "dist")
	sums, err := os.ReadFile(filepath.Join(dist, relarchive.SumsFile))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"npu-stack-" + releaseVersion + ".tgz"}
	for _, p := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"} {
		goos, goarch, _ := strings.Cut(p, "/")
		files = append(files, relarchive.ArchiveName("npu-hooks", releaseVersion, goos, goarch))
	}
	for _, f := range files {
		if !bytes.Contains(sums, []byte("  "+f+"\n")) {
			t.Errorf("SHA256SUMS lacks %s:\n%s", f, sums)
		}
	}
	check := exec.CommandContext(ctx, "sha256sum", "-c", relarchive.SumsFile)
	check.Dir = dist
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, out)
	}
	if runtime.GOOS == "linux" {
		x := exec.CommandContext(ctx, "tar", "-xzf", filepath.Join(dist, relarchive.ArchiveName("npu-hooks", releaseVersion, "linux", runtime.GOARCH)), "-C", tmp)
		if out, err := x.CombinedOutput(); err != nil {
			t.Fatalf("tar: %v\n%s", err, out)
		}
		if out, err := exec.CommandContext(ctx, filepath.Join(tmp, "npu-hooks"), "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), releaseVersion) {
			t.Errorf("npu-hooks --version from the tarball: %v\n%s", err, out)
		}
	}
}

// ourImages returns the images of npu-stack's binaries that manifests
// name in containers and init containers.
func ourImages(t *testing.T, manifests string) []string {
	t.Helper()
	var imgs []string
	for _, doc := range releaseutil.SplitManifests(manifests) {
		var obj struct {
			Spec struct {
				Template struct {
					Spec corev1.PodSpec `json:"spec"`
				} `json:"template"`
				JobTemplate struct {
					Spec struct {
						Template struct {
							Spec corev1.PodSpec `json:"spec"`
						} `json:"template"`
					} `json:"spec"`
				} `json:"jobTemplate"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("manifest: %v\n%s", err, doc)
		}
		for _, spec := range []corev1.PodSpec{obj.Spec.Template.Spec, obj.Spec.JobTemplate.Spec.Template.Spec} {
			for _, c := range append(spec.InitContainers, spec.Containers...) {
				for bin := range chartpkg.ImageKeysByBinary() {
					if strings.Contains(c.Image, "/"+bin+":") || strings.Contains(c.Image, "/"+bin+"@") {
						imgs = append(imgs, c.Image)
					}
				}
			}
		}
	}
	return imgs
}

// TestReleaseRefusesAnotherVersion: make release builds only the version
// Chart.yaml carries, and says so before building anything.
func TestReleaseRefusesAnotherVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make")
	}
	root, tmp := repoRoot(t), t.TempDir()
	cmd := exec.Command("make", "release", "VERSION="+chartYAMLVersion(t)+"-not-bumped", "RELEASE_DIR="+filepath.Join(tmp, "release"), "DIST="+filepath.Join(tmp, "dist"))
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Chart.yaml has version") {
		t.Fatalf("make release with a version Chart.yaml does not carry: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(tmp, "release")); !os.IsNotExist(err) {
		t.Errorf("make release built something before refusing: %v", err)
	}
}
