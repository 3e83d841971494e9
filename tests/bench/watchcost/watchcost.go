// Package watchcost measures what the node agents' watches cost the API
// server on an idle fleet. N real rebooters (internal/reboot.Agent, the
// code `npu-rebooter run` runs, with the chart's client settings) run in
// this process, each with its own client and connection as on N nodes,
// beside N nodes whose kubelets report their status every five minutes
// and renew their Leases, and nothing else happens. The API server's
// own metrics give the watch events it sent and its CPU, in a window
// without the agents and one with them; the agents' metrics give what
// their storm protection's watch delivered.
//
// The health-watch is not part of it: it keeps no watch (it reads its
// node once per probe interval), a cost that is per node by construction.
package watchcost

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/bench/fleet"
	"github.com/openfuyao/npu-stack/tests/bench/procstat"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

const (
	// namespace holds the slot Leases the agents watch (none exist on an
	// idle fleet).
	namespace = "npu-agents"
	// DefaultStatusEvery is the kubelet's nodeStatusReportFrequency
	// default: with node Leases on, a kubelet whose node status did not
	// change still posts it every five minutes (kubelet configuration
	// reference, KubeletConfiguration.nodeStatusReportFrequency).
	DefaultStatusEvery = 5 * time.Minute
	// settle is the pause after the agents' watches are open and before
	// the window: their initial lists and first syncs are start-up, not
	// idle cost.
	settle = 20 * time.Second
	// createWorkers create the nodes in parallel.
	createWorkers = 32
)

var keys = contract.Keys{Domain: contract.DefaultDomain}

// Config is one fleet size's measurement.
type Config struct {
	Env   *testbed.Env
	Nodes int
	// Variants are measured one after the other on the same fleet, each
	// with N agents of its own (the previous ones stopped).
	Variants []Variant
	// Window is each measurement's length.
	Window time.Duration
	// StatusEvery is each node's status report period; LeaseEvery its
	// Lease renewal period (the control plane's grace period must allow
	// it).
	StatusEvery, LeaseEvery time.Duration
	Log                     logrus.FieldLogger
}

// Run creates the fleet and measures a window without agents, then one
// per variant.
func Run(ctx context.Context, cfg Config) (Size, error) {
	out := Size{Nodes: cfg.Nodes, StatusEvery: Seconds(cfg.StatusEvery.Seconds())}
	env := cfg.Env
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return out, fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	rc := env.Config()
	rc.QPS, rc.Burst = 5000, 10000
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return out, fmt.Errorf("fleet client: %w", err)
	}
	start := time.Now()
	nodes, err := createNodes(ctx, client, cfg.Nodes)
	if err != nil {
		return out, err
	}
	out.CreateSeconds = Seconds(time.Since(start).Seconds())
	cfg.Log.WithFields(logrus.Fields{"nodes": len(nodes), "took": time.Since(start).Round(time.Second)}).Info("fleet created")

	runCtx, stopFleet := context.WithCancel(context.Background())
	var reports atomic.Int64
	all := func() []*corev1.Node { return nodes }
	lease := fleet.NewHeartbeat(fleet.HeartbeatConfig{Client: client, Every: cfg.LeaseEvery, Clock: clock.RealClock{}, Nodes: all, Log: cfg.Log})
	status := fleet.NewHeartbeat(fleet.HeartbeatConfig{Client: client, Every: cfg.StatusEvery, Clock: clock.RealClock{}, Nodes: all, Log: cfg.Log,
		Write: func(ctx context.Context, n *corev1.Node) error {
			if err := reportStatus(ctx, client, n.Name, false); err != nil {
				return err
			}
			reports.Add(1)
			return nil
		}})
	var beats sync.WaitGroup
	defer beats.Wait()
	defer stopFleet()
	beats.Go(func() { lease.Run(runCtx) })
	beats.Go(func() { status.Run(runCtx) })

	// The controllers' first pass over the new nodes (the node lifecycle
	// controller's, the first Lease renewals) is set-up, not idle cost.
	select {
	case <-ctx.Done():
		return out, ctx.Err()
	case <-time.After(max(cfg.LeaseEvery, settle)):
	}
	m := meter{env: env, reports: &reports}
	base, err := m.window(ctx, cfg.Window, nil)
	if err != nil {
		return out, err
	}
	out.Windows = append(out.Windows, base)
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	for _, v := range cfg.Variants {
		w, err := m.withAgents(ctx, cfg, names, v)
		if err != nil {
			return out, err
		}
		out.Windows = append(out.Windows, w)
	}
	out.StatusErrors, out.LeaseErrors = status.Errors(), lease.Errors()
	return out, nil
}

// withAgents starts N agents of v, waits for their watches, measures a
// window and stops them.
func (m meter) withAgents(ctx context.Context, cfg Config, names []string, v Variant) (Window, error) {
	before, err := readServer(ctx, m.env.Client.CoreV1().RESTClient())
	if err != nil {
		return Window{}, err
	}
	start := time.Now()
	ag, err := startAgents(ctx, m.env.Config(), names, v, agentLog(cfg.Log))
	if err != nil {
		return Window{}, err
	}
	defer ag.close()
	// Every agent keeps two watches of nodes (its own node, and its
	// storm protection's) and one of leases: open when the server counts
	// them.
	want := before.NodeWatches + 2*float64(len(names))
	for {
		s, err := readServer(ctx, m.env.Client.CoreV1().RESTClient())
		if err != nil {
			return Window{}, err
		}
		if s.NodeWatches >= want && s.LeaseWatches >= before.LeaseWatches+float64(len(names)) {
			break
		}
		if err := ag.failed(); err != nil {
			return Window{}, err
		}
		select {
		case <-ctx.Done():
			return Window{}, fmt.Errorf("%d agents (%s): %.0f of %.0f node watches open: %w", len(names), v, s.NodeWatches-before.NodeWatches, want-before.NodeWatches, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	startup := time.Since(start)
	cfg.Log.WithFields(logrus.Fields{"variant": v, "agents": len(names), "took": startup.Round(time.Second)}).Info("agents watching")
	select {
	case <-ctx.Done():
		return Window{}, ctx.Err()
	case <-time.After(settle):
	}
	w, err := m.window(ctx, cfg.Window, ag)
	if err != nil {
		return w, err
	}
	w.StartSeconds = Seconds(startup.Seconds())
	if err := ag.failed(); err != nil {
		return w, err
	}
	return w, nil
}

// meter reads the figures of a window.
type meter struct {
	env     *testbed.Env
	reports *atomic.Int64
}

// window measures length with ag's agents running (nil: none).
func (m meter) window(ctx context.Context, length time.Duration, ag *agents) (Window, error) {
	w := Window{Variant: "none", Seconds: Seconds(length.Seconds())}
	rest := m.env.Client.CoreV1().RESTClient()
	s0, err := readServer(ctx, rest)
	if err != nil {
		return w, err
	}
	cpu0, err := m.apiServerCPU()
	if err != nil {
		return w, err
	}
	r0 := m.reports.Load()
	var e0 int64
	if ag != nil {
		w.Variant, w.Agents = string(ag.variant), len(ag.real)
		if e0, err = ag.stormEvents(); err != nil {
			return w, err
		}
	}
	select {
	case <-ctx.Done():
		return w, ctx.Err()
	case <-time.After(length):
	}
	s1, err := readServer(ctx, rest)
	if err != nil {
		return w, err
	}
	cpu1, err := m.apiServerCPU()
	if err != nil {
		return w, err
	}
	w.NodeChanges = m.reports.Load() - r0
	w.NodeEvents, w.LeaseEvents = s1.NodeEvents-s0.NodeEvents, s1.LeaseEvents-s0.LeaseEvents
	w.APIServerCPU = Seconds((cpu1 - cpu0).Seconds())
	if ag != nil {
		e1, err := ag.stormEvents()
		if err != nil {
			return w, err
		}
		w.StormEvents = e1 - e0
	}
	return w, nil
}

func (m meter) apiServerCPU() (time.Duration, error) {
	pid, ok := m.env.Components()["kube-apiserver"]
	if !ok {
		return 0, fmt.Errorf("the control plane has no kube-apiserver process")
	}
	u, err := procstat.Read(pid)
	if err != nil {
		return 0, fmt.Errorf("CPU of kube-apiserver: %w", err)
	}
	return u.CPU, nil
}

// createNodes registers n NPU nodes (not KWOK's: their kubelet is played
// here) with a Ready status.
func createNodes(ctx context.Context, client kubernetes.Interface, n int) ([]*corev1.Node, error) {
	out := make([]*corev1.Node, n)
	errs := make([]error, createWorkers)
	var wg sync.WaitGroup
	for w := range createWorkers {
		wg.Go(func() {
			for i := w; i < n; i += createWorkers {
				name := fmt.Sprintf("idle-%05d", i)
				node, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
					corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
					contract.LabelNPUPresent: contract.True, contract.LabelChip: "910b",
				}}}, metav1.CreateOptions{})
				if err != nil {
					errs[w] = fmt.Errorf("create node %s: %w", name, err)
					return
				}
				if err := reportStatus(ctx, client, name, true); err != nil {
					errs[w] = err
					return
				}
				out[i] = node
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// reportStatus is a kubelet's status report of a node with nothing new
// to say: the Ready condition's heartbeat time moves (its transition time
// only in the first report; the strategic merge keeps it after).
func reportStatus(ctx context.Context, client kubernetes.Interface, name string, first bool) error {
	now := metav1.Now().UTC().Format(time.RFC3339)
	transition := ""
	if first {
		transition = fmt.Sprintf(`,"lastTransitionTime":%q`, now)
	}
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status","lastHeartbeatTime":%q%s}]}}`, now, transition)
	if _, err := client.CoreV1().Nodes().PatchStatus(ctx, name, []byte(patch)); err != nil {
		return fmt.Errorf("report the status of node %s: %w", name, err)
	}
	return nil
}

// agentLog is the agents' logger: warnings and errors only, the start-up
// line of N agents says nothing the benchmark's own log does not.
func agentLog(l logrus.FieldLogger) logrus.FieldLogger {
	out := logrus.New()
	out.SetLevel(logrus.WarnLevel)
	if e, ok := l.(*logrus.Logger); ok {
		out.SetOutput(e.Out)
	} else if e, ok := l.(*logrus.Entry); ok {
		out.SetOutput(e.Logger.Out)
	}
	return out
}
