package peerrun

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/bench/apicount"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// The peer's upgrade crosses the Kubernetes API, so it is tested on the
// test bed's control plane. Its nodes get no heartbeats (no fleet
// simulator here), so the controller manager's grace period outlasts the
// test.
var env *testbed.Env

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cp, err := testbed.Start(ctx, testbed.Options{NodeMonitorGracePeriod: time.Hour})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "peerrun:", err)
		os.Exit(1)
	}
	client, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		_ = cp.Stop()
		fmt.Fprintln(os.Stderr, "peerrun:", err)
		os.Exit(1)
	}
	env = &testbed.Env{ControlPlane: cp, Client: client}
	code := m.Run()
	if err := cp.Stop(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "peerrun: stop:", err)
		code = 1
	}
	os.Exit(code)
}

// A 3-node fleet upgraded by the peer reaches the library's upgrade-done
// on every node, through the library's own restart of each driver pod and
// its validation: a broken peer cannot produce a flattering ratio.
func TestPeerUpgradesEveryNodeToUpgradeDone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	bin, err := Binary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names, err := env.AddNPUNodes(ctx, 3, testbed.NodeSpec{Prefix: "peer"})
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	sel := labels.SelectorFromSet(labels.Set{contract.LabelNPUPresent: contract.True})
	f, err := Install(ctx, FleetConfig{Client: env.Client, Namespace: "npu-peer-test", NodeSelector: sel, Nodes: len(names), Log: log}, "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A load time the validator and the library's validation must wait for.
	const load = 3 * time.Second
	f.SetLoadTime(load)
	proxy, err := apicount.Start(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = proxy.Close() }()
	kc := filepath.Join(t.TempDir(), "proxy.kubeconfig")
	if err := proxy.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	// The steady state first: every node upgrade-done, the peer stopped.
	settle, err := f.Start(ctx, ProcessConfig{Binary: bin, Kubeconfig: kc, MaxParallelUpgrades: 0, MaxUnavailable: "100%", TimeScale: 1,
		LogPath: filepath.Join(t.TempDir(), "settle.log")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := settle.Stop(); err != nil {
		t.Fatal(err)
	}
	proxy.Counter.Snapshot()
	// Scaled 1:30, its planned requeue is 4 s.
	cfg := ProcessConfig{Binary: bin, Kubeconfig: kc, MaxParallelUpgrades: 0, MaxUnavailable: "100%", TimeScale: 1.0 / 30,
		LogPath: filepath.Join(t.TempDir(), "peer.log")}
	p, start, wall, err := f.Race(ctx, cfg, "1.1.0", 3*time.Minute+load, len(names), Now)
	counts := proxy.Counter.Snapshot()
	var recs []Record
	var stopErr error
	if p != nil {
		recs, stopErr = p.Stop()
	}
	if err != nil {
		t.Fatal(err)
	}
	if stopErr != nil {
		t.Fatal(stopErr)
	}
	if wall < load {
		t.Errorf("upgraded in %s, less than the driver load time %s", wall, load)
	}
	// The start-up is inside the clock: the process began after it
	// started, so its first reconcile did too.
	if len(recs) == 0 || !recs[0].Start.After(start) {
		t.Errorf("first reconcile %v, clock start %v: the peer's start-up must be inside its clock", recs, start)
	}
	// Its planned requeue ran at the time scale: the requeues during the
	// upgrade came about 4 s after a reconcile, never 2 minutes.
	if wall > time.Minute {
		t.Errorf("upgrade of %d nodes with a %s load took %s: the 1:30 requeue (4 s) was not applied", len(names), load, wall)
	}

	// The Race's watch saw each node in progress once, from after the
	// clock's start for at least the driver load (its validator held
	// meanwhile).
	ivs := p.InProgress()
	if len(ivs) != len(names) {
		t.Errorf("nodes in progress %v: want one interval for each of the %d nodes", ivs, len(names))
	}
	for _, iv := range ivs {
		if d := iv.End.Sub(iv.Start); d < load || !iv.Start.After(start) {
			t.Errorf("node %s in progress %s to %s (%s): want at least the load time %s, from after the clock's start %s", iv.Node, iv.Start, iv.End, d, load, start)
		}
	}

	// Every node: upgrade-done, schedulable, a Ready driver pod of 1.1.0
	// (deleted and re-created: the library restarted it) and a Ready
	// validator.
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := env.Client.CoreV1().Pods("npu-peer-test").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if st := n.Labels[StateLabel]; st != StateDone || n.Spec.Unschedulable {
			t.Errorf("node %s: state %q, unschedulable %t; want %s and schedulable", n.Name, st, n.Spec.Unschedulable, StateDone)
		}
		var drivers, validators int
		for _, p := range pods.Items {
			if p.Spec.NodeName != n.Name || p.DeletionTimestamp != nil || !condition(&p, corev1.PodReady) {
				continue
			}
			switch {
			case p.Labels["app"] == driverApp && p.Annotations[VersionAnnotation] == "1.1.0":
				drivers++
			case p.Labels["app"] == validatorApp:
				validators++
			}
		}
		if drivers != 1 || validators != 1 {
			t.Errorf("node %s: %d Ready driver pods of 1.1.0 and %d Ready validators, want 1 and 1", n.Name, drivers, validators)
		}
	}

	// The counting proxy saw the library do it: one driver pod deletion
	// per node, node writes (state labels, cordon, uncordon) and reads.
	got := map[apicount.Key]int{}
	for _, c := range counts {
		got[c.Key] += c.N
	}
	if d := got[apicount.Key{Verb: "delete", Resource: "pods"}]; d != len(names) {
		t.Errorf("the peer deleted %d pods, want one driver pod per node (%d); counts %v", d, len(names), counts)
	}
	if got[apicount.Key{Verb: "patch", Resource: "nodes"}] < 4*len(names) {
		t.Errorf("the peer patched nodes %d times, want at least 4 per node (states, cordon, uncordon); counts %v", got[apicount.Key{Verb: "patch", Resource: "nodes"}], counts)
	}

	// Its reconciles passed the nodes through the library's restart and
	// validation states.
	seen := map[string]bool{}
	for _, r := range recs {
		for st := range r.States {
			seen[st] = true
		}
	}
	for _, st := range []string{"upgrade-required", "pod-restart-required", "validation-required", "uncordon-required", StateDone} {
		if !seen[st] {
			t.Errorf("no reconcile found a node in %s; states seen %v", st, seen)
		}
	}
	split := SplitTime(recs, start, start.Add(wall))
	t.Logf("the peer upgraded %d nodes in %s: %+v", len(names), wall.Round(time.Millisecond), split)
	if split.Reconciles == 0 || split.Acting <= 0 {
		t.Errorf("time split %+v: want reconciles with acting time", split)
	}
}

func TestSplitTimeAttributesIdleTimeToWhatEndedIt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	recs := []Record{
		{Start: at(-5), End: at(-4), Trigger: "requeue"}, // before the window
		{Start: at(1), End: at(3), Trigger: "event"},
		{Start: at(3.5), End: at(4), Trigger: "event"},
		{Start: at(124), End: at(126), Trigger: "requeue"},
		{Start: at(126), End: at(127), Trigger: "event", Error: "conflict"},
		{Start: at(200), End: at(201), Trigger: "requeue"}, // after the window
	}
	s := SplitTime(recs, at(0), at(130))
	if s.Reconciles != 4 || s.ByTrigger["event"] != 3 || s.ByTrigger["requeue"] != 1 || s.Failed != 1 {
		t.Fatalf("split %+v: want 4 reconciles (3 event, 1 requeue), 1 failed", s)
	}
	if want := 5500 * time.Millisecond; s.Acting != want {
		t.Errorf("acting %s, want %s", s.Acting, want)
	}
	if want := 120 * time.Second; s.WaitRequeue != want {
		t.Errorf("waiting for the requeue %s, want %s (from the end at 4 s to its start at 124 s)", s.WaitRequeue, want)
	}
	if want := 130*time.Second - 5500*time.Millisecond - 120*time.Second; s.Other != want {
		t.Errorf("other %s, want %s", s.Other, want)
	}
}
