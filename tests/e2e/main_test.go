// Package e2e_test runs the product as users run it: the chart installed,
// upgraded and rolled back by the real deployers — the Helm SDK, the helm
// v3 and v4 CLIs, helmfile, Flux's helm-controller and Argo CD — with hook
// Jobs executed for real, the rebooter, driver gate and health-watch
// running as processes on simulated nodes.
package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/procnode"
)

var (
	env  *testbed.Env
	keys = contract.Keys{Domain: contract.DefaultDomain}
	// hookNode runs the hook Jobs: a non-NPU process node, which the
	// chart's hooks prefer (an NPU node may be the one rebooting).
	hookNodeOnce sync.Once
)

const (
	fleetLabel = "test.npu-stack.openfuyao.com/fleet"
	v1         = "25.3.0"
	v2         = "25.5.0"
	kernel     = "5.15.0-105-generic"
	osRelease  = "ubuntu22.04"
)

// Tests with a namespace, release and nodes of their own run in parallel,
// storiesAtOnce at a time unless -parallel says otherwise: they mostly
// wait for reboots and the engines' intervals, not for the CPU. The ones
// that stay sequential run first: the seed's commands, whose approve-all
// command annotates every NPU node (so every other story's too), and the
// controller-manager outage, which stops what every other test's
// DaemonSets and Jobs need. Flux's and helmfile's examples share the
// fixed npu-operator namespace and release npu-stack: they run one after
// the other inside one parallel test (TestDefaultNamespaceStories).
func TestMain(m *testing.M) {
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		if err := flag.Set("test.parallel", strconv.Itoa(storiesAtOnce)); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: set -parallel: %v\n", err)
			os.Exit(1)
		}
	}
	os.Exit(testbed.Main(m, &env, testbed.BuildEngines))
}

// storiesAtOnce is the default -parallel: on the 2-core machine `make
// test` is measured on, three stories at once keep tests/e2e (the longest
// package) within the other packages' time, beside them.
const storiesAtOnce = 3

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// stack is one installation of the chart on its own simulated nodes.
type stack struct {
	t       *testing.T
	ns      string
	fleet   string // node label value selecting exactly this stack's nodes
	release string
	nodes   []*procnode.Node
	vals    map[string]any
	helm    *testbed.Helm
	// auxNS holds the other release's DRA plugin (default ns).
	auxNS string
	// preCordoned is the node the admin cordoned before an upgrade: it
	// is upgraded and must stay cordoned.
	preCordoned string
}

// newStack starts n910 + n310 fresh NPU nodes (no driver loaded: the
// driver pod installs on first boot) in namespace ns (created if needed)
// and returns values for the chart with two profiles.
func newStack(t *testing.T, ns, release string, n910, n310 int) *stack {
	t.Helper()
	ctx := ctxTimeout(t, 3*time.Minute)
	hookNodeOnce.Do(func() {
		if _, err := env.AddProcessNodes(ctx, 1, testbed.NodeSpec{Prefix: "cpu", CPU: true}); err != nil {
			t.Fatal(err)
		}
	})
	if ns == "" {
		var err error
		if ns, err = env.NewNamespace(ctx, t.Name()); err != nil {
			t.Fatal(err)
		}
	}
	if release == "" {
		release = ns
	}
	// Unique per run, so -count=N reruns in the same namespace never pick
	// up an earlier run's nodes.
	fleet := fmt.Sprintf("%.50s-%05d", ns, rand.IntN(100000))
	s := &stack{t: t, ns: ns, fleet: fleet, release: release, helm: env.Helm(ns)}
	for _, p := range []struct {
		chip string
		n    int
	}{{"910b", n910}, {"310p", n310}} {
		if p.n == 0 {
			continue
		}
		nodes, err := env.AddProcessNodes(ctx, p.n, testbed.NodeSpec{Prefix: "e2e-" + p.chip, Chip: p.chip, Kernel: kernel, OS: osRelease,
			Labels: map[string]string{fleetLabel: fleet}})
		if err != nil {
			t.Fatal(err)
		}
		s.nodes = append(s.nodes, nodes...)
	}
	profile := func(chip string) map[string]any {
		return map[string]any{"name": chip, "chip": chip, "kernel": kernel, "os": osRelease, "nodeSelector": map[string]any{}}
	}
	s.vals = map[string]any{
		"namespace":       ns,
		"npuNodeSelector": map[string]any{contract.LabelNPUPresent: "true", fleetLabel: fleet},
		"driver": map[string]any{
			"version":  v1,
			"profiles": []any{profile("910b"), profile("310p")},
			"upgradePolicy": map[string]any{"autoUpgrade": true, "maxParallelUpgrades": 2, "maxUnavailable": "50%",
				"rebootTimeoutSeconds": 120},
		},
		"rebooter":    map[string]any{"uptimeGuardMinutes": 0, "metricsPort": 0, "slots": 2},
		"healthWatch": map[string]any{"probeIntervalSeconds": 5, "probeTimeoutSeconds": 2, "metricsPort": 0},
		// One fixed port on this machine for every release: off, as the
		// test bed's helm installs have it (testbed Helm values).
		"fleetExporter": map[string]any{"enabled": false},
		"hooks": map[string]any{"resume": map[string]any{"enabled": false},
			"activeDeadlineSeconds": 600},
	}
	t.Cleanup(func() {
		if t.Failed() {
			s.dumpLogs()
		}
	})
	return s
}

func (s *stack) policy() map[string]any {
	return s.vals["driver"].(map[string]any)["upgradePolicy"].(map[string]any)
}

func (s *stack) setVersion(v string) { s.vals["driver"].(map[string]any)["version"] = v }

func (s *stack) selector() string { return fleetLabel + "=" + s.fleet }

func (s *stack) names() []string {
	var out []string
	for _, n := range s.nodes {
		out = append(out, n.Name())
	}
	return out
}

// check asserts the state after a finished rollout to version: every node
// runs it, was rebooted reboots times in total, is schedulable (the
// pre-cordoned one cordoned), carries no state label, and its device
// plugin started after its driver was ready.
func (s *stack) check(ctx context.Context, version string, reboots int) {
	s.t.Helper()
	s.checkNodes(ctx, version, reboots)
	s.checkStartedAfterDriver(ctx, s.ns, "app.kubernetes.io/component="+contract.ComponentDevicePlugin, "device plugin")
}

// checkNodes is check's part on the Nodes and hosts: every node runs
// version, was rebooted reboots times, is schedulable (but the
// pre-cordoned one) and carries no state label. After a refused upgrade
// it shows that no node was touched.
func (s *stack) checkNodes(ctx context.Context, version string, reboots int) {
	s.t.Helper()
	for _, pn := range s.nodes {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, pn.Name(), metav1.GetOptions{})
		if err != nil {
			s.t.Fatal(err)
		}
		st, err := pn.Host().State()
		if err != nil {
			s.t.Fatal(err)
		}
		if v := n.Labels[keys.DriverVersion()]; v != version || st.LoadedDriver != version {
			s.t.Errorf("%s: driver label %q, loaded %q; want %s", n.Name, v, st.LoadedDriver, version)
		}
		if st.Reboots != reboots {
			s.t.Errorf("%s: rebooted %d times, want %d (one per driver change)", n.Name, st.Reboots, reboots)
		}
		if n.Spec.Unschedulable != (n.Name == s.preCordoned) {
			s.t.Errorf("%s: unschedulable %v; only the pre-cordoned node (%q) stays cordoned", n.Name, n.Spec.Unschedulable, s.preCordoned)
		}
		if v, ok := n.Labels[keys.UpgradeState()]; ok {
			s.t.Errorf("%s: state label %q left", n.Name, v)
		}
	}
}

// checkStartedAfterDriver: on every node, the pod selected by selector
// in namespace ns runs a container started after the node's
// driver pod became Ready (second resolution).
func (s *stack) checkStartedAfterDriver(ctx context.Context, ns, selector, what string) {
	s.t.Helper()
	pods, err := env.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=npu-driver-daemonset"})
	if err != nil {
		s.t.Fatal(err)
	}
	readyAt := map[string]time.Time{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					readyAt[p.Spec.NodeName] = c.LastTransitionTime.Time
				}
			}
		}
	}
	if pods, err = env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector}); err != nil {
		s.t.Fatal(err)
	}
	seen := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		seen++
		ready, ok := readyAt[p.Spec.NodeName]
		var started time.Time
		for _, cs := range p.Status.ContainerStatuses {
			if r := cs.State.Running; r != nil && r.StartedAt.After(started) {
				started = r.StartedAt.Time
			}
		}
		switch {
		case !ok:
			s.t.Errorf("node %s: no Ready driver pod", p.Spec.NodeName)
		case started.IsZero():
			s.t.Errorf("%s %s on %s is not running", what, p.Name, p.Spec.NodeName)
		case started.Before(ready.Truncate(time.Second)):
			s.t.Errorf("%s %s on %s started %s, before its driver was ready at %s", what, p.Name, p.Spec.NodeName, started, ready)
		}
	}
	if seen != len(s.nodes) {
		s.t.Errorf("%d %s pods, want one per node (%d)", seen, what, len(s.nodes))
	}
}

func (s *stack) dumpLogs() {
	s.t.Log(env.PodLogs(context.Background(), s.ns, 25))
}

func tail(s string, n int) string { return testbed.Tail(s, n) }

// kubectl runs a shell command line verbatim with the test cluster's
// kubeconfig and the built kubectl first on PATH.
func kubectl(ctx context.Context, t *testing.T, line string) string {
	t.Helper()
	out, err := shell(ctx, line)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// shell is kubectl for goroutines other than the test's: the error
// carries the command line, its exit code and output.
func shell(ctx context.Context, line string) (string, error) {
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "PATH="+env.BinDir+":"+os.Getenv("PATH"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out.String(), fmt.Errorf("%s: exit %d\n%s%s", line, ee.ExitCode(), out.String(), errOut.String())
		}
		return out.String(), fmt.Errorf("%s: %w", line, err)
	}
	return out.String(), nil
}
