package health

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/openfuyao/npu-stack/internal/budget"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/kube/kubetest"
	"github.com/openfuyao/npu-stack/internal/marker"
)

type recordedEvent struct {
	reason  contract.EventReason
	warning bool
	message string
}

type fakeRecorder struct {
	mu     sync.Mutex
	events []recordedEvent
}

func (r *fakeRecorder) Node(_ *corev1.Node, warning bool, reason contract.EventReason, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, recordedEvent{reason, warning, fmt.Sprintf(format, args...)})
}

func (r *fakeRecorder) take() []recordedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

type rig struct {
	w       *Watcher
	nodes   *kubetest.Nodes
	host    *simhost.Host
	markers marker.Dir
	rec     *fakeRecorder
	clock   *clocktesting.FakeClock
	keys    contract.Keys
	reg     *prometheus.Registry
}

func newRig(t *testing.T, threshold int, nodeLabels, nodeAnnotations map[string]string) *rig {
	t.Helper()
	h, err := simhost.Create(t.TempDir(), simhost.Spec{Chip: "910b", ChipCount: 4, Driver: "25.3.0"})
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := contract.NewKeys(contract.DefaultDomain)
	nodes := kubetest.NewNodes(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: nodeLabels, Annotations: nodeAnnotations}})
	r := &rig{nodes: nodes, host: h, rec: &fakeRecorder{}, clock: clocktesting.NewFakeClock(time.Now()), keys: keys, reg: prometheus.NewRegistry()}
	r.markers = marker.Dir{Path: h.Path("/run/npu-stack")}
	log := logrus.New()
	log.SetOutput(testWriter{t})
	r.w = NewWatcher(Config{
		NodeName: "n1", Keys: keys, Markers: r.markers, Interval: time.Second, Timeout: time.Hour,
		Policy: Policy{FailureThreshold: threshold, RecoveryThreshold: 1}, LoopGuard: budget.Budget{Max: 3, Window: time.Hour},
	}, Deps{Nodes: nodes, Host: h, Clock: r.clock, Events: r.rec, Metrics: NewMetrics(r.reg), Log: log})
	return r
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (r *rig) node(t *testing.T) *corev1.Node {
	t.Helper()
	n, err := r.nodes.Get(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (r *rig) step(t *testing.T) {
	t.Helper()
	if err := r.w.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) markerPresent() bool {
	_, ok, _ := r.markers.Ready()
	return ok
}

func eventReasons(evs []recordedEvent) string {
	var s []string
	for _, e := range evs {
		s = append(s, string(e.reason))
	}
	return strings.Join(s, ",")
}

func TestWatcherWedgeAndFalsePositive(t *testing.T) {
	r := newRig(t, 3, nil, nil)
	k := r.keys
	r.step(t)
	if n := r.node(t); n.Labels[k.DriverReady()] != "false" {
		t.Fatalf("no marker yet: driver-ready=%q, want false", n.Labels[k.DriverReady()])
	}
	_ = r.markers.SetReady("25.3.0")
	r.step(t)
	if n := r.node(t); n.Labels[k.DriverReady()] != "true" {
		t.Fatalf("marker and healthy chips: driver-ready=%q", n.Labels[k.DriverReady()])
	}

	// Two failures then healing: nothing visible happens.
	_ = r.host.Wedge(1)
	r.step(t)
	r.step(t)
	_ = r.host.Update(func(st *simhost.State) error { st.Wedged = nil; return nil })
	r.step(t)
	if n := r.node(t); n.Labels[k.RebootRequired()] != "" || n.Labels[k.DriverReady()] != "true" || !r.markerPresent() || len(r.rec.take()) != 0 {
		t.Fatalf("false positive below threshold left traces: %v marker=%v", n.Labels, r.markerPresent())
	}

	// Three failures: wedged.
	_ = r.host.Wedge(1)
	for i := 0; i < 3; i++ {
		r.step(t)
	}
	n := r.node(t)
	if n.Labels[k.RebootRequired()] != "true" || n.Annotations[k.RebootReason()] != "recovery" || n.Labels[k.DriverReady()] != "false" || r.markerPresent() {
		t.Fatalf("after 3 failures: labels %v annotations %v marker %v", n.Labels, n.Annotations, r.markerPresent())
	}
	evs := r.rec.take()
	if eventReasons(evs) != "ChipWedged,RebootRequired" || !strings.Contains(evs[0].message, "reason=recovery") || !strings.Contains(evs[1].message, "reason=recovery") {
		t.Fatalf("events %+v", evs)
	}
	if got := testutil.ToFloat64(r.w.metrics.wedged); got != 1 {
		t.Fatalf("wedged metric %v", got)
	}
	if got := testutil.ToFloat64(r.w.metrics.chipHealthy.WithLabelValues("1", "0", "910B3", "Critical")); got != 0 {
		t.Fatalf("chip 1 health metric %v, want 0", got)
	}

	// The watch restarts: it keeps the wedge.
	r.w = NewWatcher(r.w.cfg, Deps{Nodes: r.nodes, Host: r.host, Clock: r.clock, Events: r.rec, Log: logrus.New()})
	r.step(t)
	if n := r.node(t); n.Labels[k.RebootRequired()] != "true" || r.markerPresent() || len(r.rec.take()) != 0 {
		t.Fatalf("restart forgot the wedge: %v", n.Labels)
	}

	// Healed before any reboot: everything undone.
	_ = r.host.Update(func(st *simhost.State) error { st.Wedged = nil; return nil })
	r.step(t)
	n = r.node(t)
	if _, ok := n.Labels[k.RebootRequired()]; ok || n.Annotations[k.RebootReason()] != "" || n.Labels[k.DriverReady()] != "true" {
		t.Fatalf("after healing: labels %v annotations %v", n.Labels, n.Annotations)
	}
	if v, ok, _ := r.markers.Ready(); !ok || v != "25.3.0" {
		t.Fatalf("marker %q %v, want 25.3.0 restored", v, ok)
	}
	if w, _ := r.markers.Wedged(); w {
		t.Fatal("wedge record left")
	}
	if evs := r.rec.take(); eventReasons(evs) != "ChipRecovered" {
		t.Fatalf("events %+v", evs)
	}
}

func TestWatcherNeverTouchesAnUpgradeReboot(t *testing.T) {
	keys, _ := contract.NewKeys(contract.DefaultDomain)
	r := newRig(t, 1, map[string]string{keys.RebootRequired(): "true", keys.DriverReady(): "true"}, map[string]string{keys.RebootReason(): "upgrade"})
	_ = r.markers.SetReady("25.3.0")
	_ = r.host.Wedge(0)
	r.step(t)
	n := r.node(t)
	if n.Annotations[keys.RebootReason()] != "upgrade" || n.Labels[keys.RebootRequired()] != "true" || n.Labels[keys.DriverReady()] != "false" || r.markerPresent() {
		t.Fatalf("wedge with upgrade pending: %v %v", n.Labels, n.Annotations)
	}
	if evs := r.rec.take(); eventReasons(evs) != "ChipWedged" || !strings.Contains(evs[0].message, "reason=upgrade is already pending") {
		t.Fatalf("events %+v", evs)
	}
	_ = r.host.Update(func(st *simhost.State) error { st.Wedged = nil; return nil })
	r.step(t)
	n = r.node(t)
	if n.Annotations[keys.RebootReason()] != "upgrade" || n.Labels[keys.RebootRequired()] != "true" || !r.markerPresent() {
		t.Fatalf("recovery touched the upgrade: %v %v", n.Labels, n.Annotations)
	}
}

// The rollout asks for an upgrade reboot between the watch's read and its
// write: the conditional patch is refused, and the watch, deciding again
// on the fresh Node, leaves the upgrade request alone.
func TestWatcherDecidesAgainWhenTheNodeChangedUnderIt(t *testing.T) {
	keys, _ := contract.NewKeys(contract.DefaultDomain)
	r := newRig(t, 1, map[string]string{keys.DriverReady(): "true"}, nil)
	_ = r.markers.SetReady("25.3.0")
	_ = r.host.Wedge(0)
	raced := false
	r.nodes.BeforePatch = func(name string) {
		if raced {
			return
		}
		raced = true
		if _, err := r.nodes.Patch(context.Background(), name, kube.NodeChange{
			Labels: map[string]*string{keys.RebootRequired(): kube.Set("true")}, Annotations: map[string]*string{keys.RebootReason(): kube.Set("upgrade")},
		}); err != nil {
			t.Error(err)
		}
	}
	r.step(t)
	n := r.node(t)
	if !raced || n.Annotations[keys.RebootReason()] != "upgrade" || n.Labels[keys.DriverReady()] != "false" || r.markerPresent() {
		t.Fatalf("after the race: raced %v, labels %v annotations %v", raced, n.Labels, n.Annotations)
	}
	if evs := r.rec.take(); eventReasons(evs) != "ChipWedged" || !strings.Contains(evs[0].message, "reason=upgrade is already pending") {
		t.Fatalf("events %+v; want only the wedge, no recovery request", evs)
	}
}

func TestWatcherExpectedChipsFromDriverLoad(t *testing.T) {
	r := newRig(t, 1, nil, nil)
	_ = r.markers.SetReady("25.3.0")
	_ = r.markers.SetChipsAtLoad(5) // one more than the host has now
	r.step(t)
	if n := r.node(t); n.Labels[r.keys.RebootRequired()] != "true" {
		t.Fatalf("a missing chip went unnoticed: %v", n.Labels)
	}
}

func TestRunProbesWhenMarkerAppearsAndOnTheClock(t *testing.T) {
	r := newRig(t, 1, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	done := make(chan error, 1)
	go func() { done <- r.w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitNode := func(what string, cond func(*corev1.Node) bool, tick bool) {
		t.Helper()
		for !cond(r.node(t)) {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s: %v", what, r.node(t).Labels)
			}
			if tick && r.clock.HasWaiters() {
				r.clock.Step(time.Second)
			}
			runtime.Gosched()
		}
	}
	waitNode("driver-ready=false without marker", func(n *corev1.Node) bool { return n.Labels[r.keys.DriverReady()] == "false" }, false)
	// No clock step: the marker itself wakes the watch.
	if err := r.markers.SetReady("25.3.0"); err != nil {
		t.Fatal(err)
	}
	waitNode("driver-ready=true after the marker", func(n *corev1.Node) bool { return n.Labels[r.keys.DriverReady()] == "true" }, false)
	_ = r.host.Wedge(2)
	// The Node is patched before the marker goes; wait for both.
	waitNode("wedge detected on the next tick", func(n *corev1.Node) bool {
		return n.Labels[r.keys.RebootRequired()] == "true" && !r.markerPresent()
	}, true)
	if filepath.Base(r.markers.ReadyFile()) != contract.MarkerFile {
		t.Fatal("marker file name differs from the contract")
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{NodeName: "n", Interval: time.Second, Timeout: time.Second, Policy: Policy{FailureThreshold: 1, RecoveryThreshold: 1}, LoopGuard: budget.Budget{Max: 1}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.NodeName = "" },
		func(c *Config) { c.Interval = 0 },
		func(c *Config) { c.Timeout = 0 },
		func(c *Config) { c.Policy.FailureThreshold = 0 },
		func(c *Config) { c.Policy.RecoveryThreshold = 0 },
		func(c *Config) { c.LoopGuard.Max = 0 },
		func(c *Config) { c.ExpectedChips = -1 },
	} {
		c := good
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("invalid config accepted: %+v", c)
		}
	}
}
