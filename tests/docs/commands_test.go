package docs_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// docCommand is one command line of a ```sh block.
type docCommand struct {
	file string
	line int
	text string
}

func (c docCommand) String() string { return fmt.Sprintf("%s:%d: %s", c.file, c.line, c.text) }

// shCommands returns every command line in the ```sh blocks of docs/*.md
// and README.md, with `\` continuations joined; comment-only and empty
// lines are left out.
func shCommands(t *testing.T) []docCommand {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "docs", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	files = append(files, filepath.Join(repoRoot(t), "README.md"))
	var cmds []docCommand
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		in, n, pending, start := false, 0, "", 0
		for sc.Scan() {
			n++
			l := sc.Text()
			trimmed := strings.TrimSpace(l)
			switch {
			case !in && trimmed == "```sh":
				in = true
				continue
			case in && trimmed == "```":
				in = false
				continue
			case !in:
				continue
			}
			if pending == "" {
				start = n
			}
			if strings.HasSuffix(trimmed, "\\") {
				pending += strings.TrimSuffix(trimmed, "\\") + " "
				continue
			}
			text := strings.TrimSpace(pending + trimmed)
			pending = ""
			if text == "" || strings.HasPrefix(text, "#") {
				continue
			}
			cmds = append(cmds, docCommand{file: filepath.Base(f), line: start, text: text})
		}
		_ = fh.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return cmds
}

// notRunHere lists, by prefix, the documented commands this test does not
// run, and why. Everything else in a ```sh block must exit 0.
var notRunHere = []struct{ prefix, why string }{
	{"helm ", "an install (the README tour, run as written by runReadmeTour, installs the release the pages run against), a driver version change (manual mode waits for approvals given by later lines; the tour runs one with its approvals), an uninstall (later pages need the release) or a command against a registry this machine cannot reach; helm upgrades that change no driver, history and rollback run (helmRuns); tests/e2e drives the helm v3 and v4 CLIs through install, upgrade and rollback"},
	{"wait", "waits for a background helm of the README tour, which runReadmeTour runs as one shell"},
	{"kubectl wait node/npu-0 ", "waits for the README tour's upgrade (a background helm) to drain npu-0, which runReadmeTour runs as one shell"},
	{"kubectl wait node/npu-1 ", "waits for the README tour's wedge (bin/npu-cluster wedge) to be seen and healed, which runReadmeTour runs as one shell"},
	{"helmfile ", "the example file is synced by the real helmfile in tests/e2e (TestDefaultNamespaceStories/Helmfile)"},
	{"make ", "a make target: `make test` runs this test, `make demo` is the demo, `make cluster`/`cluster-down` start and stop the local cluster (this test runs its own control plane)"},
	{"export ", "this test sets KUBECONFIG and PATH itself"},
	{"skopeo ", "copies images from the vendors' registries, which this machine cannot reach; the test bed pushes stand-ins of them (tests/testbed/standin.go)"},
	{"bin/npu-cluster ", "injects a fault into `make cluster`'s simulated host; wedge detection and recovery are tested in tests/health and tests/reboot"},
	{"kubectl apply -n argocd ", "needs Argo CD; tests/e2e TestArgoCDStory applies the file to the real Argo CD"},
	{"kubectl -n argocd ", "needs Argo CD (make cluster CLUSTER_ARGS=--argocd); TestArgoCDStory drives the real one"},
	{"kubectl -n flux-system ", "needs Flux (make cluster CLUSTER_ARGS=--flux); TestDefaultNamespaceStories/Flux drives the real helm-controller"},
	{"kubectl apply -k ", "needs Flux or Argo CD: tests/e2e TestDefaultNamespaceStories/Flux and TestArgoCDStory apply the documented kustomizations to the real source-controller and helm-controller, and the real Argo CD"},
	{"sha256sum ", "checks a release's files, which this test has not downloaded; tests/release runs sha256sum -c on the SHA256SUMS make release writes"},
	{"tar -xzf npu-hooks_", "unpacks a release tarball; tests/release unpacks the one make release writes and runs its npu-hooks --version"},
	{"git ", "tags, pushes and checks out a release (docs/releasing.md), which only the maintainers do against the project's repository"},
	{"./npu-hooks ", "the binary out of a release tarball (tests/release runs it); this test runs the same commands with the npu-hooks it built"},
	{"npu-hooks uninstall ", "takes npu-stack off the cluster, which the later pages need; TestUninstallMidUpgrade runs uninstall.md's steps as written on a release of its own, caught mid-upgrade"},
}

// helmRuns says whether a documented helm command runs here (chart
// reference substituted, substituteChart): the ones that change no driver
// and keep the release, so every page's commands run against the release
// the README tour installed. Installs (the tour installs it), driver
// version changes (manual mode waits for approvals: the tour runs one
// with them) and uninstall (the later pages need the release) do not.
func helmRuns(cmd string) bool {
	switch {
	case strings.HasSuffix(strings.TrimSpace(strings.SplitN(cmd, "#", 2)[0]), "&"):
		return false // the README tour's background helm: runReadmeTour runs it
	case strings.HasPrefix(cmd, "helm history ") || strings.HasPrefix(cmd, "helm rollback "):
		return true
	case strings.HasPrefix(cmd, "helm upgrade "):
		return !strings.Contains(cmd, "--install") && !strings.Contains(cmd, "driver.version=") && strings.Contains(cmd, publishedChart)
	}
	return false
}

// publishedChart is how the pages name the released chart.
const publishedChart = "oci://ghcr.io/openfuyao/charts/npu-stack"

var publishedVersion = regexp.MustCompile(`oci://ghcr\.io/openfuyao/charts/npu-stack --version \S+`)

// substituteChart points a documented command at the test bed's chart:
// its registry and the version this checkout published there.
func substituteChart(cmd string) string {
	return publishedVersion.ReplaceAllString(cmd, env.Product.ChartRef()+" --version "+env.Product.ChartVersion)
}

func skipReason(cmd string) string {
	if helmRuns(cmd) {
		return ""
	}
	for _, s := range notRunHere {
		if strings.HasPrefix(cmd, s.prefix) {
			return s.why
		}
	}
	return ""
}

// The docs write N (or <node>) for a node name.
var nodePlaceholder = regexp.MustCompile(`(node |name=)(N|<node>)\b`)

func substituteNode(cmd, node string) string {
	return nodePlaceholder.ReplaceAllString(cmd, "${1}"+node)
}

func TestCommandExtraction(t *testing.T) {
	cmds := shCommands(t)
	ran, perFile := 0, map[string]int{}
	used := map[string]bool{}
	for _, c := range cmds {
		if !strings.HasPrefix(c.text, "kubectl ") && !strings.HasPrefix(c.text, "npu-hooks ") && !strings.HasPrefix(c.text, "bin/npu-hooks ") && !helmRuns(c.text) {
			if skipReason(c.text) == "" {
				t.Errorf("%s: neither a kubectl/npu-hooks command nor in notRunHere", c)
			}
		}
		for _, s := range notRunHere {
			if strings.HasPrefix(c.text, s.prefix) {
				used[s.prefix] = true
			}
		}
		if skipReason(c.text) == "" {
			ran++
			perFile[c.file]++
		}
		if strings.Contains(c.text, " -w") || strings.Contains(c.text, " -f job/") || strings.Contains(c.text, "--watch") {
			t.Errorf("%s: streams until interrupted; keep such commands out of ```sh blocks", c)
		}
	}
	for _, s := range notRunHere {
		if !used[s.prefix] {
			t.Errorf("notRunHere entry %q matches no documented command: remove it", s.prefix)
		}
	}
	if ran < 40 {
		t.Errorf("only %d runnable commands found in docs/*.md", ran)
	}
	for _, f := range []string{"driver-upgrade.md", "self-healing.md", "observability.md", "troubleshooting.md", "installation.md", "install.md", "first-upgrade.md", "recover-a-node.md", "workloads.md", "README.md"} {
		if perFile[f] == 0 {
			t.Errorf("no runnable command in docs/%s", f)
		}
	}
	if got := substituteNode("kubectl annotate node N a=b; kubectl get events --field-selector involvedObject.name=N", "x"); got != "kubectl annotate node x a=b; kubectl get events --field-selector involvedObject.name=x" {
		t.Errorf("substitution: %s", got)
	}
}

// installOnce installs the chart by running the README tour as written
// (runReadmeTour): release npu-stack in npu-operator from the test-bed
// registry, values-local-cluster.yaml, hooks on, three process-backed NPU
// nodes, then an upgrade to 25.5.0, a chip wedge and a rollback to 25.3.0.
// A second run (-count=2) reuses it.
func installOnce(ctx context.Context, t *testing.T) []string {
	t.Helper()
	h := env.Helm("npu-operator")
	if rel, err := h.Status("npu-stack"); err == nil && rel.Info.Status == release.StatusDeployed {
		return []string{"npu-0", "npu-1", "npu-2"}
	}
	return runReadmeTour(ctx, t)
}

// workDir is a directory laid out like the repository root for the
// commands (docs/, charts/, bin/ with the binaries of this checkout).
func workDir(t *testing.T) string {
	t.Helper()
	dir, root := t.TempDir(), repoRoot(t)
	for name, target := range map[string]string{"docs": filepath.Join(root, "docs"), "charts": filepath.Join(root, "charts"), "bin": env.ProductBinDir} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func kubectlDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("NPU_STACK_CP_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot(t), ".cache", "controlplane")
	}
	dir = filepath.Join(dir, "bin")
	if _, err := os.Stat(filepath.Join(dir, "kubectl")); err != nil {
		t.Fatalf("kubectl not built: run `make controlplane`: %v", err)
	}
	return dir
}

// TestDocCommandsRun runs every documented kubectl and npu-hooks command
// (docs/*.md, then README.md)
// verbatim (N and <node> become npu-1) with bash, in doc order, against
// the installed chart; each must exit 0.
func TestDocCommandsRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	installOnce(ctx, t)
	dir := workDir(t)
	helm, err := testbed.Engine("helm3/helm")
	if err != nil {
		t.Fatal(err)
	}
	environ := append(os.Environ(),
		"KUBECONFIG="+env.Kubeconfig,
		"PATH="+strings.Join([]string{kubectlDir(t), env.ProductBinDir, filepath.Dir(helm), os.Getenv("PATH")}, string(os.PathListSeparator)),
		"HELM_CACHE_HOME="+filepath.Join(t.TempDir(), "helm-cache"), "HELM_CONFIG_HOME="+filepath.Join(t.TempDir(), "helm-config"),
	)
	ran := 0
	for _, c := range shCommands(t) {
		if why := skipReason(c.text); why != "" {
			t.Logf("not run: %s (%s)", c, why)
			continue
		}
		cmdline := substituteChart(substituteNode(c.text, "npu-1"))
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Minute)
		cmd := exec.CommandContext(cctx, "bash", "-o", "pipefail", "-c", cmdline)
		cmd.Dir, cmd.Env = dir, environ
		out, err := cmd.CombinedOutput()
		ccancel()
		if err != nil {
			t.Errorf("%s\n  ran: %s\n  %v\n%s", c, cmdline, err, out)
			continue
		}
		ran++
	}
	t.Logf("%d documented commands ran and exited 0", ran)
}
