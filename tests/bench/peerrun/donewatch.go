// The benchmark's own watch of the peer's nodes: when every node is done, and
// each node's time in progress.

package peerrun

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/tests/bench/inflight"
)

// doneWatch follows the nodes and the driver pods until the upgrade is
// complete on want nodes.
type doneWatch struct {
	f       *Fleet
	version string
	want    int
	done    chan time.Time
	nodes   cache.Indexer
	pods    cache.Indexer

	mu       sync.Mutex
	last     string
	changed  time.Time
	finished bool
	// inflight is each node's time in progress, as the library's
	// maxParallelUpgrades counts it, from the node informer's events (one
	// goroutine: in the order seen).
	inflight inflight.Tracker
}

func newDoneWatch(f *Fleet, version string, want int) *doneWatch {
	return &doneWatch{f: f, version: version, want: want, done: make(chan time.Time, 1), changed: time.Now()}
}

func (w *doneWatch) start(ctx context.Context) error {
	c := w.f.cfg.Client
	nf := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = w.f.cfg.NodeSelector.String()
	}))
	pf := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(w.f.cfg.Namespace), informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = labels.Set{"app": driverApp}.String()
	}))
	ni, pi := nf.Core().V1().Nodes().Informer(), pf.Core().V1().Pods().Informer()
	w.nodes, w.pods = ni.GetIndexer(), pi.GetIndexer()
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { w.check() }, UpdateFunc: func(_, _ any) { w.check() }, DeleteFunc: func(any) { w.check() }}
	for _, inf := range []cache.SharedIndexInformer{ni, pi} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("peer upgrade watch: %w", err)
		}
	}
	observe := func(o any) {
		if n, ok := o.(*corev1.Node); ok {
			w.observe(n.Name, n.Labels[StateLabel], time.Now())
		}
	}
	if _, err := ni.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: observe, UpdateFunc: func(_, o any) { observe(o) }}); err != nil {
		return fmt.Errorf("peer upgrade watch: %w", err)
	}
	nf.Start(ctx.Done())
	pf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), ni.HasSynced, pi.HasSynced) {
		return fmt.Errorf("peer upgrade watch: informers did not sync: %w", ctx.Err())
	}
	return nil
}

// check counts the nodes done and the nodes per library state.
func (w *doneWatch) check() {
	now := time.Now()
	ready := map[string]bool{}
	for _, o := range w.pods.List() {
		p := o.(*corev1.Pod)
		if p.DeletionTimestamp == nil && p.Annotations[VersionAnnotation] == w.version && condition(p, corev1.PodReady) {
			ready[p.Spec.NodeName] = true
		}
	}
	states := map[string]int{}
	done, nodes := 0, 0
	for _, o := range w.nodes.List() {
		n := o.(*corev1.Node)
		nodes++
		st := n.Labels[StateLabel]
		states[st]++
		if st == StateDone && !n.Spec.Unschedulable && ready[n.Name] {
			done++
		}
	}
	status := fmt.Sprintf("%d of %d nodes done; states %v", done, w.f.cfg.Nodes, states)
	w.mu.Lock()
	defer w.mu.Unlock()
	if status != w.last {
		w.last, w.changed = status, now
	}
	if !w.finished && done >= w.want && nodes == w.f.cfg.Nodes {
		w.finished = true
		w.done <- now
	}
}

// observe records a node's library state seen at at.
func (w *doneWatch) observe(node, state string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight.Observe(node, at, inflight.PeerInProgress(state))
}

// inProgress are the nodes' times in progress seen so far, a node still
// in progress closed at end.
func (w *doneWatch) inProgress(end time.Time) []inflight.Interval {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inflight.Intervals(end)
}

// restart counts the stall from at (the clock's start: the wait at the
// gate is not the peer's).
func (w *doneWatch) restart(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.changed = at
}

func (w *doneWatch) status() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

func (w *doneWatch) idle() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Since(w.changed)
}
