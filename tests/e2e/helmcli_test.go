package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestHelm3CLIStory: the helm v3.22 CLI from the module proxy, the chart
// pulled from the registry, `helm upgrade --reuse-values --set
// driver.version`, `helm rollback`.
func TestHelm3CLIStory(t *testing.T) {
	t.Parallel() // its own namespace, release and nodes: see main_test.go
	s := newStack(t, "", "", 2, 1)
	runStory(t, s, newHelmCLI(t, s, "helm3/helm"))
}

// TestHelm4CLIStory: the helm v4.3 CLI with --wait=watcher (kstatus) on
// every action: the driver DaemonSets become current before the
// post-upgrade hook that reboots, so the wait never deadlocks it. Then
// the failure stories on the same fleet (runCLIFailures).
func TestHelm4CLIStory(t *testing.T) {
	t.Parallel() // its own namespace, release and nodes: see main_test.go
	s := newStack(t, "", "", 2, 1)
	h := newHelmCLI(t, s, "helm4/helm")
	h.extra = []string{"--wait=watcher"}
	runStory(t, s, h)
	if !t.Failed() {
		ctx := ctxTimeout(t, 15*time.Minute)
		runCLIFailures(ctx, t, s, h, h.helmUpgrade(ctx))
	}
}

// helmCLI runs a real helm binary as a user would.
type helmCLI struct {
	s     *stack
	bin   string
	extra []string // flags for install, upgrade and rollback
	// chart is what install and upgrade take: an oci:// reference and
	// its flags.
	chart     []string
	installed bool
}

func newHelmCLI(t *testing.T, s *stack, engine string) *helmCLI {
	t.Helper()
	bin, err := testbed.Engine(engine)
	if err != nil {
		t.Fatal(err)
	}
	h := &helmCLI{s: s, bin: bin, chart: []string{env.Product.ChartRef(), "--version", env.Product.ChartVersion, "--plain-http"}}
	t.Cleanup(func() {
		if _, err := h.run(context.Background(), "uninstall", s.release, "-n", s.ns, "--timeout", "2m"); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return h
}

// run execs the CLI with the test cluster's kubeconfig and a HOME of its
// own (helm's cache and registry config).
func (h *helmCLI) run(ctx context.Context, args ...string) (string, error) {
	return runEngine(ctx, h.bin, filepath.Dir(h.bin), nil, args...)
}

// runEngine execs bin with the test cluster's kubeconfig, pathDir and
// the control plane's binaries (kubectl) first on PATH, and extraEnv.
func runEngine(ctx context.Context, bin, pathDir string, extraEnv []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	home := filepath.Join(env.Dir, "home-"+filepath.Base(pathDir))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "HOME="+home, "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"),
		"PATH="+pathDir+":"+env.BinDir+":"+os.Getenv("PATH"))
	cmd.Env = append(cmd.Env, extraEnv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, tail(out.String(), 30))
	}
	return out.String(), nil
}

// async runs args in the background; the returned wait fails the test
// with the CLI's output if it failed.
func asyncRun(ctx context.Context, t *testing.T, run func(context.Context, ...string) (string, error), args ...string) func() {
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, args...)
		done <- err
	}()
	return func() {
		t.Helper()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func (h *helmCLI) deploy(ctx context.Context, t *testing.T, vals map[string]any) func() {
	t.Helper()
	if !h.installed {
		h.installed = true
		file := writeValues(t, vals)
		args := append([]string{"install", h.s.release}, h.chart...)
		args = append(args, "-n", h.s.ns, "-f", file, "--set", "imageRegistry="+env.Product.Registry, "--timeout", "10m")
		return asyncRun(ctx, t, h.run, append(args, h.extra...)...)
	}
	// The user's upgrade: only the version changes.
	version := vals["driver"].(map[string]any)["version"].(string)
	args := append([]string{"upgrade", h.s.release}, h.chart...)
	args = append(args, "-n", h.s.ns, "--reuse-values", "--set", "driver.version="+version, "--timeout", "15m")
	return asyncRun(ctx, t, h.run, append(args, h.extra...)...)
}

func (h *helmCLI) rollback(ctx context.Context, t *testing.T) func() {
	args := append([]string{"rollback", h.s.release, "1", "-n", h.s.ns, "--timeout", "15m"}, h.extra...)
	return asyncRun(ctx, t, h.run, args...)
}

func (h *helmCLI) deployAux(ctx context.Context, t *testing.T, c *auxChart, vals map[string]any) {
	t.Helper()
	args := []string{"install", c.Name, c.Ref(), "--version", c.Version, "--plain-http", "-n", h.s.ns, "-f", writeValues(t, vals), "--wait", "--timeout", "3m"}
	if _, err := h.run(ctx, args...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = h.run(context.Background(), "uninstall", c.Name, "-n", h.s.ns) })
}

// verify reads `helm history` and `helm get manifest`: the release's own
// record of what it deployed, compared with the cluster.
func (h *helmCLI) verify(ctx context.Context, t *testing.T, step int) {
	t.Helper()
	verifyHelmRelease(ctx, t, h.run, h.s, step)
}

// helmRevision is one row of `helm history -o json`.
type helmRevision struct {
	Revision    int    `json:"revision"`
	Status      string `json:"status"`
	Description string `json:"description"`
}

func verifyHelmRelease(ctx context.Context, t *testing.T, run func(context.Context, ...string) (string, error), s *stack, step int) {
	t.Helper()
	out, err := run(ctx, "history", s.release, "-n", s.ns, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var hist []helmRevision
	if err := json.Unmarshal([]byte(out), &hist); err != nil {
		t.Fatalf("helm history: %v\n%s", err, out)
	}
	if len(hist) != step {
		t.Fatalf("helm history has %d revisions after step %d: %+v", len(hist), step, hist)
	}
	for i, r := range hist {
		want := "superseded"
		if i == len(hist)-1 {
			want = "deployed"
		}
		if r.Status != want {
			t.Errorf("revision %d is %s, want %s (%s)", r.Revision, r.Status, want, r.Description)
		}
	}
	if step == 3 && hist[2].Description != "Rollback to 1" {
		t.Errorf("revision 3: %q, want a rollback to 1", hist[2].Description)
	}
	manifest, err := run(ctx, "get", "manifest", s.release, "-n", s.ns)
	if err != nil {
		t.Fatal(err)
	}
	assertNoDrift(ctx, t, manifest)
}

// writeValues writes vals as a values file.
func writeValues(t *testing.T, vals map[string]any) string {
	t.Helper()
	b, err := yaml.Marshal(vals)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), fmt.Sprintf("values-%d.yaml", time.Now().UnixNano()))
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}
