package health_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/marker"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/procnode"
)

var (
	env  *testbed.Env
	keys = contract.Keys{Domain: contract.DefaultDomain}
)

// fleetLabel selects one test's nodes: the chart's npuNodeSelector, so
// its DaemonSets land on no other test's nodes.
const fleetLabel = "npu-stack.test/fleet"

const (
	driverSelector  = "app=npu-driver-daemonset"
	pluginSelector  = "app.kubernetes.io/component=device-plugin"
	markerDir       = "/run/npu-stack"
	desiredVersion  = "25.5.0"
	previousVersion = "25.3.0"
)

func TestMain(m *testing.M) { os.Exit(testbed.Main(m, &env)) }

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// fleetOptions tune one test's installation.
type fleetOptions struct {
	nodes int
	// loaded is the driver already loaded at first boot ("" = fresh).
	loaded        string
	probeInterval int
	threshold     int
	devicePlugin  bool
	// recoveryThreshold is healthWatch.recoveryThreshold (0: chart default).
	recoveryThreshold int
	// rebooter and recovery, if set, enable the rebooter with these
	// rebooter and recoveryPolicy values.
	rebooter, recovery map[string]any
	// metricsPort is healthWatch.metricsPort (0: off, as the test bed sets
	// it unless a test chooses a port).
	metricsPort int
	// noNRI: the nodes' runtime offers no NRI when the chart is installed.
	noNRI bool
}

type fleet struct {
	t     *testing.T
	ns    string
	nodes []*procnode.Node
}

// newFleet starts process nodes in a namespace of their own and installs
// the real chart there: the driver DaemonSet (driver-entry + watch
// sidecar) and optionally the device plugin with its validate and CDI
// init containers. No rebooter: a wedge stays pending, so recovery can be
// observed.
func newFleet(t *testing.T, o fleetOptions) *fleet {
	t.Helper()
	ctx := ctxTimeout(t, 3*time.Minute)
	base := strings.ToLower(strings.TrimPrefix(t.Name(), "Test"))
	if len(base) > 24 {
		base = base[:24]
	}
	nsObj, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "hw-" + base + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	ns := nsObj.Name
	nodes, err := env.AddProcessNodes(ctx, o.nodes, testbed.NodeSpec{Prefix: "hw-" + base, Labels: map[string]string{fleetLabel: ns}, Driver: o.loaded, ChipCount: 4})
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, ns: ns, nodes: nodes}
	if o.noNRI {
		for _, n := range nodes {
			n.StopNRI()
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range f.nodes {
				t.Logf("driver pod logs on %s:\n%s", n.Name(), f.logs(n, "driver")+f.logs(n, "watch"))
			}
		}
	})
	vals := map[string]any{
		"namespace":       ns,
		"npuNodeSelector": map[string]any{fleetLabel: ns},
		"driver":          map[string]any{"version": desiredVersion},
		"healthWatch":     map[string]any{"probeIntervalSeconds": o.probeInterval, "probeTimeoutSeconds": 1, "failureThreshold": o.threshold},
		"devicePlugin":    map[string]any{"enabled": o.devicePlugin},
		"cdi":             map[string]any{"enabled": o.devicePlugin},
		"exporter":        map[string]any{"enabled": false},
		"rebooter":        map[string]any{"enabled": false},
		"hooks":           map[string]any{"preflight": map[string]any{"enabled": false}, "resume": map[string]any{"enabled": false}},
	}
	if o.metricsPort > 0 {
		vals["healthWatch"].(map[string]any)["metricsPort"] = o.metricsPort
	}
	if o.recoveryThreshold > 0 {
		vals["healthWatch"].(map[string]any)["recoveryThreshold"] = o.recoveryThreshold
	}
	if o.rebooter != nil {
		vals["rebooter"], vals["recoveryPolicy"] = o.rebooter, o.recovery
	}
	if _, err := env.Helm(ns).Install(ctx, ns, vals, testbed.InstallOptions{DisableHooks: true}); err != nil {
		t.Fatal(err)
	}
	return f
}

// logs is what a container of the driver pod(s) on node printed, across
// pods and restarts.
func (f *fleet) logs(node *procnode.Node, container string) string {
	pods, err := env.Client.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: driverSelector, FieldSelector: "spec.nodeName=" + node.Name()})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		b.WriteString(node.Logs(f.ns, p.Name, container))
	}
	return b.String()
}

// driverPod waits until the node's driver pod satisfies cond and returns it.
func (f *fleet) driverPod(ctx context.Context, node *procnode.Node, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	f.t.Helper()
	var found *corev1.Pod
	seen := 0
	lw := cache.NewFilteredListWatchFromClient(env.Client.CoreV1().RESTClient(), "pods", f.ns, func(o *metav1.ListOptions) {
		o.LabelSelector = driverSelector
		o.FieldSelector = "spec.nodeName=" + node.Name()
	})
	// WaitFor ends on a condition error, so "not yet" is (false, nil).
	err := testbed.WaitFor(ctx, lw, &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		seen = len(pods)
		for _, p := range pods {
			if p.DeletionTimestamp == nil && cond(p) {
				found = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		f.t.Fatalf("driver pod on %s: %s: %v (%d driver pods, none matching)", node.Name(), what, err, seen)
	}
	return found
}

func podReady(p *corev1.Pod) bool { return podCondition(p, corev1.PodReady) }

// podCondition reports whether p's condition of type t is True.
func podCondition(p *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podRunning(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

func waitNode(ctx context.Context, t *testing.T, name, what string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	return testbed.WaitNode(ctx, t, env.Client, name, what, cond)
}

// healthy: the watch says the driver is ready and no recovery is pending.
func healthy(version string) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool {
		_, req := n.Labels[keys.RebootRequired()]
		_, reason := n.Annotations[keys.RebootReason()]
		return n.Labels[keys.DriverReady()] == contract.True && n.Labels[keys.DriverVersion()] == version && !req && !reason
	}
}

func wedged(n *corev1.Node) bool {
	return n.Labels[keys.RebootRequired()] == contract.True && n.Annotations[keys.RebootReason()] == string(contract.ReasonRecovery) &&
		n.Labels[keys.DriverReady()] == contract.False
}

// waitEvent waits for an Event with reason on node whose message contains
// substr.
func waitEvent(ctx context.Context, t *testing.T, node string, reason contract.EventReason, substr string) {
	t.Helper()
	testbed.WaitNodeEvent(ctx, t, env.Client, node, string(reason), substr)
}

func countEvents(t *testing.T, node string, reason contract.EventReason) int {
	t.Helper()
	evs, err := env.Client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", node), fields.OneTermEqualSelector("reason", string(reason))).String()})
	if err != nil {
		t.Fatal(err)
	}
	return len(evs.Items)
}

func markers(node *procnode.Node) marker.Dir {
	return marker.Dir{Path: node.Host().Path(markerDir)}
}

// eventually polls cond (for what no watch exists: a file on the
// simulated host, a process log) until it holds or ctx ends.
func eventually(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

func heal(t *testing.T, node *procnode.Node) {
	t.Helper()
	if err := node.Host().Update(func(st *simhost.State) error { st.Wedged = nil; return nil }); err != nil {
		t.Fatal(err)
	}
}

// waitAll waits until at least one pod exists and every pod satisfies cond.
func waitAll(ctx context.Context, lw cache.ListerWatcher, cond func(*corev1.Pod) bool) error {
	last := "no pods"
	err := testbed.WaitFor(ctx, lw, &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if !cond(p) {
				last = fmt.Sprintf("pod %s: phase %s, init %v", p.Name, p.Status.Phase, initStates(p))
				return false, nil
			}
		}
		return len(pods) > 0, nil
	})
	if err != nil {
		return fmt.Errorf("%w (%s)", err, last)
	}
	return nil
}

func initStates(p *corev1.Pod) []string {
	var out []string
	for _, c := range p.Status.InitContainerStatuses {
		switch {
		case c.State.Running != nil:
			out = append(out, c.Name+"=running")
		case c.State.Terminated != nil:
			out = append(out, fmt.Sprintf("%s=exit %d", c.Name, c.State.Terminated.ExitCode))
		case c.State.Waiting != nil:
			out = append(out, c.Name+"="+c.State.Waiting.Reason)
		}
	}
	return out
}
