// Package scenario runs driver rollouts on a local control plane with
// KWOK nodes and measures them: the chart installed with the Helm SDK (its
// driver, device-plugin and exporter DaemonSets, whose pods KWOK runs),
// the node side played by the fleet simulator, and `npu-hooks rollout` run
// as the real binary with the chart's hook arguments, talking to the API
// server through a counting proxy.
package scenario

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/tests/bench/apicount"
	"github.com/openfuyao/npu-stack/tests/bench/fleet"
	"github.com/openfuyao/npu-stack/tests/bench/peerrun"
	"github.com/openfuyao/npu-stack/tests/bench/steplat"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// Namespace of the chart and the rollout lease.
const Namespace = "npu-bench"

const (
	release0      = "npu-bench"
	driverApp     = "app=npu-driver-daemonset"
	firstVersion  = "1.0.0"
	nodePrefix    = "bench"
	createWorkers = 8
	// healthyLabel marks the N nodes of the fleet, all but the wedged one.
	healthyLabel = "bench.npu-stack.openfuyao.com/healthy"
)

var keys = contract.Keys{Domain: contract.DefaultDomain}

// Config sets up a Bed.
type Config struct {
	Env   *testbed.Env
	Nodes int
	// Dir receives the rollout logs.
	Dir string
	// HeartbeatEvery is the simulated kubelets' Lease renewal period (0:
	// fleet.DefaultHeartbeatEvery).
	HeartbeatEvery time.Duration
	// PeerBinary is npu-peer; set, the peer's DaemonSets are installed
	// too, for the scenarios that run the peer.
	PeerBinary string
	// PeerApart gives the peer a fleet of its own, N more nodes beside
	// npu-stack's, for scenarios that run both sides at once; otherwise
	// the peer's DaemonSets run on npu-stack's N healthy nodes.
	PeerApart bool
	// ProxyBinary is npu-apicount, the counting proxy each side talks
	// through, each its own process.
	ProxyBinary string
	Log         logrus.FieldLogger
}

// Bed is a control plane with N simulated NPU nodes running the chart,
// plus one wedged NPU node, and ordinary workloads on every node.
type Bed struct {
	cfg Config
	// wedged is the node whose chips never probe healthy: its recovery
	// waits for an approval nobody gives, so every rollout leaves it
	// behind.
	wedged  string
	sim     *fleet.Sim
	proxy   *apicount.Remote
	kubecfg string
	// flow is the FlowSchema of the rollout's requests (startProxy).
	flow string
	// peerProxy counts the peer's requests, peerKubecfg points at it,
	// peerFlow classifies them.
	peerProxy   *apicount.Remote
	peerKubecfg string
	peerFlow    string
	// idleAPIServer is the API server's CPU rate (cores) with the fleet
	// set up and nothing upgrading.
	idleAPIServer float64
	rec           *steplat.Recorder
	events        *kube.Recorder
	stop          context.CancelFunc
	vals          map[string]any
	versions      int
	// peer is the peer's DaemonSets and node side (nil: none).
	peer         *peerrun.Fleet
	peerVersions int
}

// Setup adds the nodes, starts the simulator and installs the chart with
// driver 1.0.0 loaded everywhere.
func Setup(ctx context.Context, cfg Config) (*Bed, error) {
	env := cfg.Env
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", Namespace, err)
	}
	// The simulator writes for thousands of nodes at once; its client
	// must not be what limits the rollout.
	rc := env.Config()
	rc.QPS, rc.Burst = 5000, 10000
	simClient, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("simulator client: %w", err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	b := &Bed{cfg: cfg, stop: stop, rec: steplat.NewRecorder(keys, time.Now), events: kube.NewRecorder(simClient, "npu-rebooter")}
	nodeSel := labels.SelectorFromSet(labels.Set{contract.LabelNPUPresent: contract.True})
	driverSel, _ := labels.Parse(driverApp)
	b.sim = fleet.New(fleet.Config{
		Client: simClient, Keys: keys, NodeSelector: nodeSel, Namespace: Namespace, DriverSelector: driverSel,
		Machine:        simhost.Spec{Chip: "910b", ChipCount: 8, Driver: firstVersion},
		HeartbeatEvery: cfg.HeartbeatEvery,
		Clock:          clock.RealClock{}, Recorder: b.events, Log: cfg.Log,
	})
	if err := b.sim.Run(runCtx); err != nil {
		b.Close()
		return nil, err
	}
	if err := b.startRecorder(runCtx, simClient, nodeSel); err != nil {
		b.Close()
		return nil, err
	}
	// Nodes are added once the simulator runs: its heartbeats must reach
	// each node within the controller manager's grace period.
	if err := addNodes(ctx, env, cfg.Nodes); err != nil {
		b.Close()
		return nil, err
	}
	wedged, err := env.AddNPUNodes(ctx, 1, testbed.NodeSpec{Prefix: nodePrefix + "-wedged", Labels: map[string]string{fleet.WedgedLabel: contract.True}})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("add the wedged node: %w", err)
	}
	b.wedged = wedged[0]
	if b.proxy, b.kubecfg, b.flow, err = startProxy(ctx, cfg, "npu-stack"); err != nil {
		b.Close()
		return nil, err
	}
	b.vals = map[string]any{
		"namespace": Namespace,
		"driver": map[string]any{"version": firstVersion, "upgradePolicy": map[string]any{
			"autoUpgrade": true, "maxParallelUpgrades": 1, "maxUnavailable": maxUnavailable, "rebootTimeoutSeconds": 3600,
		}},
		// The simulator is every node's rebooter.
		"rebooter": map[string]any{"enabled": false},
		"hooks":    map[string]any{"resume": map[string]any{"enabled": false}, "preflight": map[string]any{"enabled": false}},
	}
	if _, err := env.Helm(Namespace).Install(ctx, release0, b.vals, testbed.InstallOptions{DisableHooks: true}); err != nil {
		b.Close()
		return nil, fmt.Errorf("install the chart: %w", err)
	}
	if err := b.waitSettled(ctx, firstVersion); err != nil {
		b.Close()
		return nil, err
	}
	if err := b.addWorkloads(ctx); err != nil {
		b.Close()
		return nil, err
	}
	if cfg.PeerBinary != "" {
		if err := b.setupPeer(ctx, simClient); err != nil {
			b.Close()
			return nil, err
		}
	}
	if err := b.measureIdle(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// addNodes registers n KWOK NPU nodes, several creators at once.
func addNodes(ctx context.Context, env *testbed.Env, n int) error {
	var wg sync.WaitGroup
	errs := make([]error, createWorkers)
	for w := 0; w < createWorkers; w++ {
		share := n / createWorkers
		if w < n%createWorkers {
			share++
		}
		wg.Add(1)
		go func(w, share int) {
			defer wg.Done()
			_, errs[w] = env.AddNPUNodes(ctx, share, testbed.NodeSpec{Prefix: nodePrefix, Labels: map[string]string{healthyLabel: contract.True}})
		}(w, share)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("add %d KWOK nodes: %w", n, err)
		}
	}
	return nil
}

// startRecorder watches nodes and the pods of the chart (driver, device
// plugin, exporter: what validation waits for after a reboot) for the step
// latencies.
func (b *Bed) startRecorder(ctx context.Context, client kubernetes.Interface, nodeSel labels.Selector) error {
	nf := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = nodeSel.String()
	}))
	pf := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(Namespace))
	ni, pi := nf.Core().V1().Nodes().Informer(), pf.Core().V1().Pods().Informer()
	_, _ = ni.AddEventHandler(b.rec.NodeHandler())
	_, _ = pi.AddEventHandler(b.rec.PodHandler())
	nf.Start(ctx.Done())
	pf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), ni.HasSynced, pi.HasSynced) {
		return fmt.Errorf("step latency recorder: informers did not sync: %w", ctx.Err())
	}
	return nil
}

// Close stops the simulator, the recorder and the proxy.
func (b *Bed) Close() {
	b.stop()
	if b.peer != nil {
		b.peer.Close()
	}
	for _, p := range []*apicount.Remote{b.proxy, b.peerProxy} {
		if p != nil {
			_ = p.Close()
		}
	}
	b.events.Shutdown()
}

// waitSettled waits until every node but the wedged one runs version,
// ready, with no upgrade state, the wedged one asks for a recovery
// reboot, and every DaemonSet has a Ready pod on every node.
func (b *Bed) waitSettled(ctx context.Context, version string) error {
	n := b.cfg.Nodes
	var last string
	wedgedAsks := false
	err := testbed.WaitFor(ctx, cache.NewFilteredListWatchFromClient(b.cfg.Env.Client.CoreV1().RESTClient(), "nodes", "", func(o *metav1.ListOptions) {
		o.LabelSelector = contract.LabelNPUPresent + "=true"
	}), &corev1.Node{}, func(nodes []*corev1.Node) (bool, error) {
		ok := 0
		for _, nd := range nodes {
			if nd.Name == b.wedged {
				wedgedAsks = nd.Labels[keys.RebootRequired()] == contract.True && nd.Annotations[keys.RebootReason()] == string(contract.ReasonRecovery)
				continue
			}
			if nd.Labels[keys.DriverVersion()] == version && nd.Labels[keys.DriverReady()] == contract.True &&
				nd.Labels[keys.UpgradeState()] == "" && nd.Status.NodeInfo.BootID != "" {
				ok++
			}
		}
		last = fmt.Sprintf("%d of %d nodes at driver %s and ready; wedged node %s asks for a recovery reboot: %v", ok, n, version, b.wedged, wedgedAsks)
		return ok == n && len(nodes) == n+1 && wedgedAsks, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the fleet to settle (%s): %w", last, err)
	}
	return b.waitDaemonSets(ctx, false)
}

// stallAfter is how long the DaemonSets may show no change before the
// fleet counts as stuck.
const stallAfter = 5 * time.Minute

// waitDaemonSets waits for a Ready pod of every DaemonSet on every node;
// with driverUpdated, the driver DaemonSet's pods must also all be of its
// current template (what `helm upgrade --wait` waits for before the
// post-upgrade hook runs the rollout).
func (b *Bed) waitDaemonSets(ctx context.Context, driverUpdated bool) error {
	// A fleet that stops progressing is broken (pods marked NotReady by
	// the node lifecycle controller stay so: KWOK does not make them Ready
	// again), not slow: end the wait with what is known.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		last     string
		progress = time.Now()
		stalled  error
	)
	go func() {
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			mu.Lock()
			idle := time.Since(progress)
			if idle > stallAfter {
				stalled = fmt.Errorf("no DaemonSet progressed for %s (node Lease renewals up to %s late; a lease older than the controller manager's grace period makes it mark the node's pods NotReady)",
					idle.Round(time.Second), b.sim.Stats().HeartbeatMaxLag.Round(time.Millisecond))
			}
			mu.Unlock()
			if stalled != nil {
				cancel()
				return
			}
		}
	}()
	err := testbed.WaitFor(ctx, cache.NewListWatchFromClient(b.cfg.Env.Client.AppsV1().RESTClient(), "daemonsets", Namespace, fields.Everything()),
		&appsv1.DaemonSet{}, func(dss []*appsv1.DaemonSet) (bool, error) {
			var not []string
			for _, ds := range dss {
				st := ds.Status
				ready := st.ObservedGeneration >= ds.Generation && st.DesiredNumberScheduled == int32(b.cfg.Nodes+1) && st.NumberReady == st.DesiredNumberScheduled
				if driverUpdated && ds.Labels["app"] == "npu-driver-daemonset" {
					ready = ready && st.UpdatedNumberScheduled == st.DesiredNumberScheduled
				}
				if !ready {
					not = append(not, fmt.Sprintf("%s (%d/%d ready, %d updated)", ds.Name, st.NumberReady, st.DesiredNumberScheduled, st.UpdatedNumberScheduled))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if now := strings.Join(not, ", "); now != last {
				last, progress = now, time.Now()
			}
			return len(dss) >= 3 && len(not) == 0, nil
		})
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		if stalled != nil {
			err = stalled
		}
		return fmt.Errorf("waiting for the DaemonSets (%s): %w", last, err)
	}
	return nil
}

// rolloutCommand is the rollout hook Job's container as the Job runs it:
// its args as rendered and its environment as the kubelet resolves it
// (GOMEMLIMIT from the container's memory limit), so the measured process
// is the one a cluster would run.
func rolloutCommand(rel *release.Release) (args, env []string, err error) {
	for _, h := range rel.Hooks {
		if !strings.HasSuffix(h.Name, "-rollout") {
			continue
		}
		var job batchv1.Job
		if err := yaml.Unmarshal([]byte(h.Manifest), &job); err != nil {
			return nil, nil, fmt.Errorf("decode the rollout hook %s: %w", h.Name, err)
		}
		c := job.Spec.Template.Spec.Containers[0]
		env, err := containerEnv(c)
		if err != nil {
			return nil, nil, fmt.Errorf("rollout hook %s: %w", h.Name, err)
		}
		return c.Args, env, nil
	}
	return nil, nil, fmt.Errorf("release %s has no rollout hook", rel.Name)
}

// containerEnv resolves what the benchmark can of a container's env: plain
// values and its own resource limits.
func containerEnv(c corev1.Container) ([]string, error) {
	var out []string
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			out = append(out, e.Name+"="+e.Value)
		case e.ValueFrom.ResourceFieldRef != nil:
			ref := e.ValueFrom.ResourceFieldRef
			res, ok := strings.CutPrefix(ref.Resource, "limits.")
			q, set := c.Resources.Limits[corev1.ResourceName(res)]
			if !ok || !set {
				return nil, fmt.Errorf("env %s: %s of container %s is not a limit it sets", e.Name, ref.Resource, c.Name)
			}
			div := int64(1)
			if !ref.Divisor.IsZero() {
				div = ref.Divisor.Value()
			}
			out = append(out, fmt.Sprintf("%s=%d", e.Name, (q.Value()+div-1)/div))
		default:
			return nil, fmt.Errorf("env %s of container %s: the benchmark resolves values and resource limits only", e.Name, c.Name)
		}
	}
	return out, nil
}
