package docs_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// tourNotRun are the README tour's lines this test leaves out, and why;
// every other line runs as written, in one shell, in order.
var tourNotRun = map[string]string{
	"make build engines cluster ENGINES=helm3": "the test bed is the cluster: it built the binaries, the registry (images, chart, driver stand-ins) and npu-0..npu-2 as make cluster does; the engines come from .cache/engines",
	"make cluster-down":                        "the test bed stops its control plane, registry and nodes itself",
}

// tourRegistry is the registry address the tour names (make cluster's);
// the test bed's registry listens on a free port instead.
const tourRegistry = "127.0.0.1:5000"

// readmeTour returns the README's "5-minute tour" ```sh block as a
// script: comments kept, the lines in tourNotRun left out.
func readmeTour(t *testing.T) (script string, skipped int) {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	section, in := false, false
	var lines []string
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "## "):
			section = l == "## 5-minute tour"
		case section && !in && l == "```sh":
			in = true
		case in && l == "```":
			in, section = false, false
		case in:
			cmd := strings.TrimSpace(l)
			if i := strings.Index(cmd, "   #"); i >= 0 {
				cmd = strings.TrimSpace(cmd[:i])
			}
			if _, skip := tourNotRun[cmd]; skip {
				skipped++
				continue
			}
			lines = append(lines, strings.ReplaceAll(l, tourRegistry, env.Registry.Host))
		}
	}
	if len(lines) < 10 {
		t.Fatalf("README's tour has %d lines", len(lines))
	}
	return strings.Join(lines, "\n") + "\n", skipped
}

// tourDir lays out a directory as the tour expects a checkout after `make
// build engines cluster`: bin/ (npu-hooks, npu-cluster), docs/,
// .cache/controlplane, .cache/engines, .cache/cluster/run/kubeconfig and
// the process nodes' simulated hosts under .cache/cluster/run/nodes.
func tourDir(ctx context.Context, t *testing.T, nodes []string) string {
	t.Helper()
	dir, root := t.TempDir(), repoRoot(t)
	engines, err := testbed.EnginesDir()
	if err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"docs":                          filepath.Join(root, "docs"),
		"charts":                        filepath.Join(root, "charts"),
		".cache/controlplane":           filepath.Dir(kubectlDir(t)),
		".cache/engines":                engines,
		".cache/cluster/run/kubeconfig": env.Kubeconfig,
	}
	bins, err := os.ReadDir(env.ProductBinDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bins {
		links["bin/"+b.Name()] = filepath.Join(env.ProductBinDir, b.Name())
	}
	for _, n := range nodes {
		pn, ok := env.ProcessNode(n)
		if !ok {
			t.Fatalf("%s is not a process node", n)
		}
		links[".cache/cluster/run/nodes/"+n+"/host"] = pn.Host().Dir
	}
	for rel, target := range links {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "bin", "npu-cluster"), "./tests/cmd/npu-cluster")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build npu-cluster: %v\n%s", err, out)
	}
	return dir
}

// runReadmeTour runs the README tour as written in one bash (its `&` and
// `wait` as in a user's shell) on three fresh process nodes named as make
// cluster names them, and checks where it leaves the fleet: rolled back to
// 25.3.0 (revision 3), every node done and Ready.
func runReadmeTour(ctx context.Context, t *testing.T) []string {
	t.Helper()
	pn, err := env.AddProcessNodes(ctx, 3, testbed.NodeSpec{Prefix: "npu"})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, n := range pn {
		nodes = append(nodes, n.Name())
	}
	if strings.Join(nodes, ",") != "npu-0,npu-1,npu-2" {
		t.Fatalf("nodes %v: the tour names npu-0..npu-2 (as make cluster does)", nodes)
	}
	// make cluster copies the driver images of 25.3.0 and 25.5.0 for its
	// profile into its registry, as the air-gapped install's skopeo does.
	h := env.Helm("npu-operator")
	vals := valuesFile(t, filepath.Join(examplesDir(t), "values-local-cluster.yaml"))
	for _, v := range []string{"25.3.0", "25.5.0"} {
		vals["driver"].(map[string]any)["version"] = v
		if err := h.MirrorDriverImages(ctx, vals); err != nil {
			t.Fatal(err)
		}
	}
	script, skipped := readmeTour(t)
	dir := tourDir(ctx, t, nodes)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HELM_CACHE_HOME="+filepath.Join(dir, ".helm-cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, ".helm-config"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README tour (%d lines left out: %v): %v\n--- script\n%s--- output\n%s--- the cluster at the failure\n%s",
			skipped, tourNotRun, err, script, out, tourState(t, nodes))
	}
	t.Logf("README tour ran in %s (%d lines left out):\n%s", time.Since(start).Round(time.Second), skipped, out)
	// A background helm that fails does not fail the shell: its error
	// is in the output, and its revision is "failed" in the history.
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "Error:") {
			t.Errorf("the README tour printed %q", strings.TrimSpace(l))
		}
	}
	cfg, err := h.Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	hist, err := action.NewHistory(cfg).Run("npu-stack")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range hist {
		if r.Info.Status != release.StatusSuperseded && r.Info.Status != release.StatusDeployed {
			t.Errorf("revision %d of the tour's release is %s: %s", r.Version, r.Info.Status, r.Info.Description)
		}
	}
	rel, err := h.Status("npu-stack")
	if err != nil {
		t.Fatal(err)
	}
	if rel.Version != 3 || rel.Config["driver"].(map[string]any)["version"] != "25.3.0" {
		t.Errorf("after the tour: release revision %d, values %v; want revision 3 (install, upgrade, rollback) at 25.3.0", rel.Version, rel.Config)
	}
	keys := contract.Keys{Domain: contract.DefaultDomain}
	for _, n := range nodes {
		node, err := env.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v, st := node.Labels[keys.DriverVersion()], node.Labels[keys.UpgradeState()]; v != "25.3.0" || st != "" || node.Spec.Unschedulable || !nodeReady(node) {
			t.Errorf("node %s after the tour: driver %q state %q cordoned %v", n, v, st, node.Spec.Unschedulable)
		}
	}
	return nodes
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// tourState is what a failed tour leaves to find its cause with: each
// node's npu-stack labels and annotations, the Events of the nodes, and
// the last lines of the chart's container logs on the process nodes.
func tourState(t *testing.T, nodes []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var b strings.Builder
	for _, name := range nodes {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			fmt.Fprintf(&b, "node %s: %v\n", name, err)
			continue
		}
		fmt.Fprintf(&b, "node %s: unschedulable=%t\n", name, n.Spec.Unschedulable)
		for _, kv := range []map[string]string{n.Labels, n.Annotations} {
			for k, v := range kv {
				if strings.Contains(k, "npu.openfuyao.com/") {
					fmt.Fprintf(&b, "  %s=%s\n", k, v)
				}
			}
		}
	}
	evs, err := env.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node"})
	if err != nil {
		fmt.Fprintf(&b, "node events: %v\n", err)
	} else {
		// Events recorded through events.k8s.io carry only an event time.
		at := func(e corev1.Event) time.Time {
			if e.LastTimestamp.IsZero() {
				return e.EventTime.Time
			}
			return e.LastTimestamp.Time
		}
		sort.Slice(evs.Items, func(i, j int) bool { return at(evs.Items[i]).Before(at(evs.Items[j])) })
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "event %s %s %s x%d: %s\n", at(e).UTC().Format(time.TimeOnly), e.InvolvedObject.Name, e.Reason, e.Count, e.Message)
		}
	}
	b.WriteString(env.PodLogs(ctx, "npu-operator", 40))
	return b.String()
}
