package rollout_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/procnode"
)

var keys = contract.Keys{Domain: contract.DefaultDomain}

// fleet is one test's process nodes running the whole chart (driver with
// its gate and health-watch, rebooter, device plugin, exporter), driver
// OldVersion loaded everywhere.
type fleet struct {
	t      *testing.T
	ns     string
	nodes  []*procnode.Node
	vals   map[string]any
	policy map[string]any
}

const (
	oldVersion = "1.0.0"
	newVersion = "2.0.0"
)

// newFleet starts n nodes and installs the chart on them without hooks
// (the tests run npu-hooks themselves). edit adjusts the upgrade policy.
func newFleet(t *testing.T, n int, edit func(policy, rebooter map[string]any)) *fleet {
	t.Helper()
	return newFleetWith(t, n, edit, nil)
}

// newFleetWith is newFleet with more chart values (top-level keys).
func newFleetWith(t *testing.T, n int, edit func(policy, rebooter map[string]any), more map[string]any) *fleet {
	t.Helper()
	ctx := ctxTimeout(t, 4*time.Minute)
	ns := namespace(t)
	nodes, err := env.AddProcessNodes(ctx, n, testbed.NodeSpec{Prefix: "ro", Labels: map[string]string{fleetLabel: ns}, Driver: oldVersion})
	if err != nil {
		t.Fatal(err)
	}
	policy := map[string]any{"autoUpgrade": true, "maxParallelUpgrades": 1, "maxUnavailable": "25%", "rebootTimeoutSeconds": 120}
	rebooter := map[string]any{"uptimeGuardMinutes": 0, "metricsPort": 0, "slots": 3}
	if edit != nil {
		edit(policy, rebooter)
	}
	f := &fleet{t: t, ns: ns, nodes: nodes, policy: policy}
	f.vals = map[string]any{
		"namespace":       ns,
		"npuNodeSelector": map[string]any{contract.LabelNPUPresent: "true", fleetLabel: ns},
		"driver":          map[string]any{"version": oldVersion, "upgradePolicy": policy},
		"rebooter":        rebooter,
		"healthWatch":     map[string]any{"probeIntervalSeconds": 5, "probeTimeoutSeconds": 2},
		"hooks":           map[string]any{"resume": map[string]any{"enabled": false}, "preflight": map[string]any{"enabled": false}},
	}
	for k, v := range more {
		f.vals[k] = v
	}
	if _, err := env.Helm(ns).Install(ctx, ns, f.vals, testbed.InstallOptions{DisableHooks: true}); err != nil {
		t.Fatal(err)
	}
	// The release's agents keep probing and watching after the test; on a
	// small machine a package's worth of idle fleets slows the next tests.
	// Registered first, so it runs after the log dump below.
	t.Cleanup(func() { _ = env.Helm(ns).Uninstall(ns) })
	start := time.Now()
	f.waitNodes(ctx, "driver "+oldVersion+" loaded and ready", func(n *corev1.Node) bool {
		return n.Labels[keys.DriverVersion()] == oldVersion && n.Labels[keys.DriverReady()] == contract.True
	})
	t.Logf("fleet of %d ready %s after the install", n, time.Since(start).Round(time.Second))
	t.Cleanup(func() {
		if t.Failed() {
			f.dumpLogs()
		}
	})
	return f
}

func (f *fleet) names() []string {
	var out []string
	for _, n := range f.nodes {
		out = append(out, n.Name())
	}
	return out
}

func (f *fleet) selector() string { return fleetLabel + "=" + f.ns }

// waitNodes waits until cond holds for every node of the fleet.
func (f *fleet) waitNodes(ctx context.Context, what string, cond func(*corev1.Node) bool) {
	f.t.Helper()
	var not []string
	err := testbed.WaitFor(ctx, cache.NewFilteredListWatchFromClient(env.Client.CoreV1().RESTClient(), "nodes", "", func(o *metav1.ListOptions) {
		o.LabelSelector = f.selector()
	}), &corev1.Node{}, func(nodes []*corev1.Node) (bool, error) {
		not = not[:0]
		for _, n := range nodes {
			if !cond(n) {
				not = append(not, n.Name)
			}
		}
		return len(nodes) == len(f.nodes) && len(not) == 0, nil
	})
	if err != nil {
		f.t.Fatalf("%s: %v (not yet: %v)", what, err, not)
	}
}

// upgrade changes driver.version like `helm upgrade --set
// driver.version=v` (hooks off) and returns the rollout Job's arguments as
// the chart renders them.
func (f *fleet) upgrade(ctx context.Context, version string) []string {
	f.t.Helper()
	f.vals["driver"].(map[string]any)["version"] = version
	rel, err := env.Helm(f.ns).Upgrade(ctx, f.ns, f.vals, testbed.InstallOptions{DisableHooks: true})
	if err != nil {
		f.t.Fatal(err)
	}
	return rolloutArgs(f.t, rel)
}

// rolloutArgs extracts the rollout hook Job's container args.
func rolloutArgs(t *testing.T, rel *release.Release) []string {
	t.Helper()
	for _, h := range rel.Hooks {
		if !strings.HasSuffix(h.Name, "-rollout") {
			continue
		}
		var job batchv1.Job
		if err := yaml.Unmarshal([]byte(h.Manifest), &job); err != nil {
			t.Fatalf("decode rollout hook: %v", err)
		}
		return job.Spec.Template.Spec.Containers[0].Args
	}
	t.Fatalf("release %s has no rollout hook", rel.Name)
	return nil
}

// rolloutProc is one npu-hooks rollout process.
type rolloutProc struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	code int
}

// startRollout runs npu-hooks with the chart's args plus extra, with a
// stable lease identity (a restarted process takes its lease back at once,
// like a restarted container of the same pod).
func (f *fleet) startRollout(args []string, extra ...string) *rolloutProc {
	f.t.Helper()
	logf, err := os.CreateTemp(f.t.TempDir(), "rollout-*.log")
	if err != nil {
		f.t.Fatal(err)
	}
	all := append(append([]string{}, args...), "--lease-identity=rollout-"+f.ns, "--lease-duration=5s", "--log-level=debug")
	all = append(all, extra...)
	cmd := exec.Command(filepath.Join(env.ProductBinDir, "npu-hooks"), all...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	r := &rolloutProc{cmd: cmd, log: logf, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		r.code = cmd.ProcessState.ExitCode()
		close(r.done)
	}()
	started := time.Now()
	f.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-r.done
		// Where a failed test's time went: the rollout's own log, with
		// its timestamps, next to the pods' logs.
		if f.t.Failed() {
			f.t.Logf("rollout started %s, its log (end):\n%s", started.UTC().Format(time.RFC3339), tail(r.output(), 60))
		}
	})
	return r
}

func (r *rolloutProc) output() string {
	b, _ := os.ReadFile(r.log.Name())
	return string(b)
}

// wait waits for the process to exit and returns its exit code.
func (r *rolloutProc) wait(ctx context.Context, t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
		return r.code
	case <-ctx.Done():
		t.Fatalf("rollout did not finish: %v\n%s", ctx.Err(), r.output())
	}
	return -1
}

func (f *fleet) dumpLogs() {
	f.t.Log(env.PodLogs(context.Background(), f.ns, 25))
}

func tail(s string, n int) string { return testbed.Tail(s, n) }

// invariants watches the fleet's nodes the whole time and records the
// most nodes unavailable (cordoned or NotReady) at once.
type invariants struct {
	mu             sync.Mutex
	maxUnavailable int
	worst          []string
	stop           chan struct{}
	// cordonsOnly counts cordoned nodes only: while the control plane is
	// down, nodes go NotReady for want of heartbeats, whatever the
	// rollout does; what it must bound is what it takes down itself.
	cordonsOnly bool
}

func (f *fleet) watchInvariants() *invariants { return f.watch(false) }

// watchCordons is watchInvariants counting only cordoned nodes.
func (f *fleet) watchCordons() *invariants { return f.watch(true) }

func (f *fleet) watch(cordonsOnly bool) *invariants {
	inv := &invariants{stop: make(chan struct{}), cordonsOnly: cordonsOnly}
	reflectNodes(f.t, f.selector(), inv.stop, inv.see)
	f.t.Cleanup(func() { close(inv.stop) })
	return inv
}

// reflectNodes hands judge every state of the nodes matching selector
// until stop closes: after each watch event, and after a whole relist.
//
// A reflector into the judge itself, not an informer: after a watch is
// cut (an API server restart) the relist arrives as one Replace, judged
// once as the snapshot it is. An informer hands the relist over node by
// node, and client-go's watch-list hands it over in map order, so a node
// written just before the cut would be judged beside another's state from
// before its own earlier write: a fleet no moment of the cluster held.
func reflectNodes(t *testing.T, selector string, stop <-chan struct{}, judge func([]*corev1.Node)) {
	t.Helper()
	store := &judgedStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), judge: judge}
	r := cache.NewReflectorWithOptions(testbed.NodesLW(env.Client, selector), &corev1.Node{}, store, cache.ReflectorOptions{})
	go r.Run(stop)
}

// judgedStore judges every state the reflector stores.
type judgedStore struct {
	cache.Store
	judge func([]*corev1.Node)
}

func (s *judgedStore) Add(o any) error    { return s.see(s.Store.Add(o)) }
func (s *judgedStore) Update(o any) error { return s.see(s.Store.Update(o)) }
func (s *judgedStore) Delete(o any) error { return s.see(s.Store.Delete(o)) }
func (s *judgedStore) Replace(list []any, rv string) error {
	return s.see(s.Store.Replace(list, rv))
}

func (s *judgedStore) see(err error) error {
	if err != nil {
		return err
	}
	var nodes []*corev1.Node
	for _, o := range s.List() {
		nodes = append(nodes, o.(*corev1.Node))
	}
	s.judge(nodes)
	return nil
}

// see judges one state of the fleet.
func (inv *invariants) see(nodes []*corev1.Node) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	var down []string
	for _, n := range nodes {
		if n.Spec.Unschedulable || (!nodeReady(n) && !inv.cordonsOnly) {
			down = append(down, n.Name)
		}
	}
	if len(down) > inv.maxUnavailable {
		sort.Strings(down)
		inv.maxUnavailable, inv.worst = len(down), down
	}
}

func (inv *invariants) max() (int, []string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.maxUnavailable, inv.worst
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkDone asserts the end state of a finished rollout: every node on the
// new driver with its labels cleaned up, rebooted exactly once, and
// uncordoned unless in keepCordoned.
func (f *fleet) checkDone(ctx context.Context, keepCordoned ...string) {
	f.t.Helper()
	for _, pn := range f.nodes {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, pn.Name(), metav1.GetOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
		if v := n.Labels[keys.DriverVersion()]; v != newVersion {
			f.t.Errorf("%s: driver-version %q, want %s", n.Name, v, newVersion)
		}
		for _, k := range []string{keys.UpgradeState(), keys.RebootRequired()} {
			if v, ok := n.Labels[k]; ok {
				f.t.Errorf("%s: label %s=%s left behind", n.Name, k, v)
			}
		}
		for k := range n.Annotations {
			if strings.HasPrefix(k, keys.Domain+"/driver-upgrade.") && k != keys.RebootHistory() && k != keys.RebootStartedAt() && k != keys.RebootFromBootID() && k != keys.RebootedFromBootID() {
				f.t.Errorf("%s: bookkeeping annotation %s left behind", n.Name, k)
			}
		}
		want := !contains(keepCordoned, n.Name)
		if n.Spec.Unschedulable == want {
			f.t.Errorf("%s: unschedulable=%t, want %t", n.Name, n.Spec.Unschedulable, !want)
		}
		st, err := pn.Host().State()
		if err != nil {
			f.t.Fatal(err)
		}
		if st.Reboots != 1 || st.LoadedDriver != newVersion {
			f.t.Errorf("%s: %d reboots with driver %q loaded, want exactly 1 reboot and %s", n.Name, st.Reboots, st.LoadedDriver, newVersion)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// waitNode waits until cond holds for node.
func waitNode(ctx context.Context, t *testing.T, name, what string, cond func(*corev1.Node) bool) {
	t.Helper()
	testbed.WaitNode(ctx, t, env.Client, name, what, cond)
}

// events returns the events of reason on node once at least min of them
// exist (events are written asynchronously by their recorders).
func events(ctx context.Context, t *testing.T, node string, reason contract.EventReason, min int) []*corev1.Event {
	t.Helper()
	lw := cache.NewFilteredListWatchFromClient(env.Client.CoreV1().RESTClient(), "events", "", func(o *metav1.ListOptions) {
		o.FieldSelector = "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + string(reason)
	})
	var got []*corev1.Event
	err := testbed.WaitFor(ctx, lw, &corev1.Event{}, func(es []*corev1.Event) (bool, error) {
		got = es
		return len(es) >= min, nil
	})
	if err != nil {
		t.Fatalf("%s: want at least %d %s events, have %d: %v", node, min, reason, len(got), err)
	}
	return got
}

// upgradePath is every state change of an upgrade, as NPUDriverUpgrade
// events name them.
var upgradePath = []string{"up-to-date", "upgrade-required", "cordon-required", "wait-for-jobs-required", "pod-deletion-required",
	"drain-required", "reboot-required", "validation-required", "uncordon-required", "up-to-date"}

// traceEveryTransition waits until the node's NPUDriverUpgrade events name
// every transition of upgradePath: one event per transition, or one event
// for steps taken in one write ("a → b → c: ...").
func traceEveryTransition(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	lw := cache.NewFilteredListWatchFromClient(env.Client.CoreV1().RESTClient(), "events", "", func(o *metav1.ListOptions) {
		o.FieldSelector = "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + string(contract.EventNPUDriverUpgrade)
	})
	var missing []string
	var msgs []string
	err := testbed.WaitFor(ctx, lw, &corev1.Event{}, func(es []*corev1.Event) (bool, error) {
		msgs = msgs[:0]
		for _, e := range es {
			msgs = append(msgs, e.Message)
		}
		all := strings.Join(msgs, "\n")
		missing = missing[:0]
		for i := 1; i < len(upgradePath); i++ {
			if step := upgradePath[i-1] + " → " + upgradePath[i]; !strings.Contains(all, step) {
				missing = append(missing, step)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Errorf("%s: NPUDriverUpgrade events must trace every transition; missing %q in:\n%s", node, missing, strings.Join(msgs, "\n"))
	}
}

// checkReRolled asserts the validation's re-roll: every device-plugin and
// exporter pod of the fleet started after its node's driver pod became
// Ready (in the second-resolution of Kubernetes timestamps).
func (f *fleet) checkReRolled(ctx context.Context) {
	f.t.Helper()
	pods, err := env.Client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	readyAt := map[string]time.Time{}
	for _, p := range pods.Items {
		if p.Labels["app"] != "npu-driver-daemonset" || p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				readyAt[p.Spec.NodeName] = c.LastTransitionTime.Time
			}
		}
	}
	checked := 0
	for _, p := range pods.Items {
		comp := p.Labels["app.kubernetes.io/component"]
		if comp != contract.ComponentDevicePlugin && comp != contract.ComponentExporter || p.DeletionTimestamp != nil {
			continue
		}
		ready, ok := readyAt[p.Spec.NodeName]
		if !ok {
			f.t.Errorf("node %s has no Ready driver pod", p.Spec.NodeName)
			continue
		}
		var started time.Time
		for _, cs := range p.Status.ContainerStatuses {
			if r := cs.State.Running; r != nil && r.StartedAt.After(started) {
				started = r.StartedAt.Time
			}
		}
		if started.IsZero() || started.Before(ready.Truncate(time.Second)) {
			f.t.Errorf("%s pod %s on %s started at %s, before its driver became ready at %s", comp, p.Name, p.Spec.NodeName, started, ready)
		}
		checked++
	}
	if checked != 2*len(f.nodes) {
		f.t.Errorf("checked %d device-plugin and exporter pods, want %d", checked, 2*len(f.nodes))
	}
}
