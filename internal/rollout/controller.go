package rollout

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// errorBackoff is the pause before retrying after an API error that is
// not a stale view (which the informers resolve by themselves).
const errorBackoff = time.Second

// decisionPause is how many times a decision's duration the loop waits
// before the next (pokes coalesce meanwhile). A decision costs CPU in
// proportion to the nodes and pods; in a large rollout changes come
// faster than that, and deciding back to back takes CPU from the API
// server the rollout waits on, for no gain in wall time. With 4 the loop
// decides at most a fifth of the time, and a step waits at most four
// decisions' time more.
const decisionPause = 4

// Config wires a Controller.
type Config struct {
	Client    kubernetes.Interface
	Recorder  *kube.Recorder // nil: no events (plan, status)
	Log       logrus.FieldLogger
	Clock     clock.Clock
	Keys      contract.Keys
	Namespace string
	// NodeSelector selects the NPU nodes; DriverSelector the driver
	// DaemonSets in Namespace.
	NodeSelector   labels.Selector
	DriverSelector labels.Selector
	Targets        []TargetSpec
	Policy         Policy
	// WritesInFlight is the number of writers: nodes written at once,
	// whatever decision their actions came from (0: DefaultWritesInFlight).
	WritesInFlight int
	// NodeObserver, if set, sees every NPU node the rollout's informer
	// sees (slim, as cached): the rollout record (internal/rolloutrecord).
	NodeObserver cache.ResourceEventHandler
}

// DefaultWritesInFlight is the default of Config.WritesInFlight.
const DefaultWritesInFlight = 16

// Controller runs the rollout loop on informers.
type Controller struct {
	cfg   Config
	nodes corelisters.NodeLister
	pods  cache.Indexer // of *CachedPod
	dsets appslisters.DaemonSetLister
	// dsetIndex is the store behind dsets.
	dsetIndex cache.Indexer
	factory   []informers.SharedInformerFactory
	// informers are those outside a factory (the filtered ones).
	informers []cache.SharedIndexInformer
	synced    []cache.InformerSynced
	wake      chan struct{}

	mu sync.Mutex
	// evicting holds the nodes with an eviction running.
	evicting map[string]bool
	// queued holds each node's actions from the decision that handed them
	// to the writers until they are written (or failed and paused).
	queued map[string][]Action
	// written holds the Nodes as our own patches returned them until the
	// informer catches up: deciding on a cache that lags our writes would
	// admit nodes past maxUnavailable (each patch is conditional on its
	// own node only, not on the budget).
	written map[string]*corev1.Node
	// observed is when this process first saw each node in its step,
	// on its own clock: what timeouts count from (observe.go).
	observed observer
	// background counts evictions and the pauses after failed writes:
	// work that outlives the writer that started it.
	background sync.WaitGroup
	// passes counts Run's decisions: what a request count divides by to
	// compare with a controller's requests per reconcile.
	passes atomic.Int64
	// announced is, per node, the window opening its last
	// MaintenanceWindowClosed event named (Run's goroutine only).
	announced map[string]time.Time
}

// Passes is how many decisions Run has made.
func (c *Controller) Passes() int64 { return c.passes.Load() }

// Why a node gets no action for now (Decision.Waiting).
const (
	busyEvicting = "eviction in progress"
	busyWriting  = "write on its way"
)

// NewController sets up informers; Start begins watching.
func NewController(cfg Config) *Controller {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.WritesInFlight <= 0 {
		cfg.WritesInFlight = DefaultWritesInFlight
	}
	c := &Controller{cfg: cfg, wake: make(chan struct{}, 1), evicting: map[string]bool{}, queued: map[string][]Action{}}
	transform := slimTransform(cfg.Keys)
	nodeSelector := labels.Everything()
	if cfg.NodeSelector != nil {
		nodeSelector = cfg.NodeSelector
	}
	nodeF := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithTransform(transform),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = nodeSelector.String() }))
	ni := nodeF.Core().V1().Nodes()
	// NPU workloads, wait-for pods and re-roll targets may live in any
	// namespace, so pods and DaemonSets are watched across namespaces but
	// cached only if a node view reads them (cacheScope): a cluster's
	// ordinary workloads would otherwise make up most of the rollout's
	// memory and wake it on every change.
	scope := newCacheScope(cfg)
	pi := c.filteredInformer(&corev1.Pod{}, transform, scope.keepPod, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		o.FieldSelector = podFieldSelector
		return cfg.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = podFieldSelector
		return cfg.Client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
	})
	dsNamespace := scope.daemonSetNamespace()
	di := c.filteredInformer(&appsv1.DaemonSet{}, transform, scope.keepDaemonSet, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return cfg.Client.AppsV1().DaemonSets(dsNamespace).List(ctx, o)
	}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return cfg.Client.AppsV1().DaemonSets(dsNamespace).Watch(ctx, o)
	})
	c.factory = []informers.SharedInformerFactory{nodeF}
	c.nodes, c.pods, c.dsetIndex = ni.Lister(), pi.GetIndexer(), di.GetIndexer()
	c.dsets = appslisters.NewDaemonSetLister(c.dsetIndex)
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.poke() },
		UpdateFunc: func(any, any) { c.poke() },
		DeleteFunc: func(any) { c.poke() },
	}
	for _, inf := range []cache.SharedIndexInformer{ni.Informer(), pi, di} {
		_, _ = inf.AddEventHandler(h)
		c.synced = append(c.synced, inf.HasSynced)
	}
	if cfg.NodeObserver != nil {
		_, _ = ni.Informer().AddEventHandler(cfg.NodeObserver)
	}
	return c
}

// filteredInformer is an informer of example's kind listing and watching
// through list and watch, caching only what keep accepts, transformed.
func (c *Controller) filteredInformer(example runtime.Object, transform cache.TransformFunc, keep func(runtime.Object) bool,
	list cache.ListWithContextFunc, watchFn cache.WatchFuncWithContext) cache.SharedIndexInformer {
	lw := newFilteredLW(&cache.ListWatch{ListWithContextFunc: list, WatchFuncWithContext: watchFn}, keep)
	inf := cache.NewSharedIndexInformerWithOptions(lw, example, cache.SharedIndexInformerOptions{
		Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
	})
	_ = inf.SetTransform(transform) // cannot fail before the informer runs
	c.informers = append(c.informers, inf)
	return inf
}

// CachedKeys are the namespace/name keys of the pods and DaemonSets in
// the rollout's caches: what it reads of the cluster besides the NPU
// nodes.
func (c *Controller) CachedKeys() (pods, daemonSets []string) {
	return c.pods.ListKeys(), c.dsetIndex.ListKeys()
}

// poke asks for a new decision; pokes coalesce.
func (c *Controller) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Start starts the informers and waits for their caches.
func (c *Controller) Start(ctx context.Context) error {
	for _, f := range c.factory {
		f.Start(ctx.Done())
	}
	for _, inf := range c.informers {
		go inf.RunWithContext(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("informer caches did not sync: %w", ctx.Err())
	}
	return nil
}

// Snapshot builds the current view from the informer caches.
func (c *Controller) Snapshot() (Snapshot, error) {
	in, v, err := c.inputs()
	if err != nil {
		return Snapshot{}, err
	}
	return BuildSnapshot(in, v), nil
}

// inputs are the cached objects (with our own newer writes) a snapshot
// is built from.
func (c *Controller) inputs() (Inputs, View, error) {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return Inputs{}, View{}, fmt.Errorf("list nodes: %w", err)
	}
	nodes, busy := c.overlay(nodes)
	cached := c.pods.List()
	pods := make([]*CachedPod, 0, len(cached))
	for _, o := range cached {
		if p, ok := o.(*CachedPod); ok {
			pods = append(pods, p)
		}
	}
	all, err := c.dsets.List(labels.Everything())
	if err != nil {
		return Inputs{}, View{}, fmt.Errorf("list daemonsets: %w", err)
	}
	var drivers []*appsv1.DaemonSet
	for _, ds := range all {
		if ds.Namespace == c.cfg.Namespace && c.cfg.DriverSelector.Matches(labels.Set(ds.Labels)) {
			drivers = append(drivers, ds)
		}
	}
	targets, missing := ResolveTargets(c.cfg.Targets, all)
	seen := c.observed.observe(nodes, c.cfg.Keys, c.cfg.Clock.Now())
	returned, since := c.observed.settled()
	p := c.cfg.Policy
	return Inputs{Nodes: nodes, Pods: pods, Drivers: drivers, Targets: targets, Missing: missing, Busy: busy, Seen: seen,
			Returned: returned, ObservedSince: since},
		View{Keys: c.cfg.Keys, Canary: p.Canary, WaitSelector: p.WaitForCompletion.Selector}, nil
}

// Decide decides once on the current caches: one step per node, what
// `status` reports as each node's next step.
func (c *Controller) Decide() (Snapshot, Decision, error) {
	s, err := c.Snapshot()
	if err != nil {
		return s, Decision{}, err
	}
	return s, Decide(s, c.cfg.Policy, c.cfg.Keys, c.cfg.Clock.Now()), nil
}

// decideChained decides on the current caches with each node carried as
// far as the cluster allows now (DecideChained): what Run applies.
func (c *Controller) decideChained() (Snapshot, Decision, error) {
	in, v, err := c.inputs()
	if err != nil {
		return Snapshot{}, Decision{}, err
	}
	s, d := DecideChained(in, v, c.cfg.Policy, c.cfg.Keys, c.cfg.Clock.Now())
	return s, d, nil
}

// Run decides and acts on every change until the rollout is over (or ctx
// ends, returning ctx's error with the last decision).
//
// A decision's writes go to a pool of writers and the loop decides again
// on the next change without waiting for them: a node whose boot ID just
// changed, or a slot just freed, is not held up behind the writes of the
// decision before. A node with writes on their way is busy until they
// land, and counts against the budget as they will leave it (see overlay).
func (c *Controller) Run(ctx context.Context) (Decision, error) {
	q, stop := c.startWriters(ctx)
	defer stop()
	var last Decision
	var lastMissing, lastCanary string
	var quietUntil time.Time
	timer := c.cfg.Clock.NewTimer(time.Hour)
	defer timer.Stop()
	c.observed.begin(c.cfg.Clock.Now())
	c.poke()
	for {
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-c.wake:
		case <-timer.C():
		}
		if wait := quietUntil.Sub(c.cfg.Clock.Now()); wait > 0 {
			select {
			case <-ctx.Done():
				return last, ctx.Err()
			case <-c.cfg.Clock.After(wait):
			}
		}
		began := c.cfg.Clock.Now()
		s, d, err := c.decideChained()
		if err != nil {
			return last, err
		}
		c.passes.Add(1)
		last = d
		if m := fmt.Sprint(s.Missing); len(s.Missing) > 0 && m != lastMissing {
			c.cfg.Log.WithField("targets", s.Missing).Warn("re-roll targets not found; skipping them")
			lastMissing = m
		}
		if w := NoCanaryWarning(s, c.cfg.Policy); w != "" && w != lastCanary {
			c.cfg.Log.Warn(w)
			lastCanary = w
		}
		c.enqueue(q, d.Actions)
		c.announce(d.Announce)
		quietUntil = c.cfg.Clock.Now().Add(decisionPause * c.cfg.Clock.Since(began))
		if d.Outcome != Running && len(d.Actions) == 0 && c.idle() && !waitsForWindow(ctx, d) {
			return d, nil
		}
		if d.Requeue > 0 {
			// Timeouts count in whole seconds on the node; a little slack
			// keeps the wake-up from landing just before one expires.
			timer.Reset(d.Requeue + 50*time.Millisecond)
		}
	}
}

// WaitForChange blocks until the informers see a change (true) or ctx ends
// (false); for `status --watch`, which does not Run.
func (c *Controller) WaitForChange(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-c.wake:
		return true
	}
}

func (c *Controller) remember(n *corev1.Node) {
	// Held as the cache holds nodes: at thousands of nodes the informer
	// may lag many writes, and whole patch responses add up.
	n = slimNode(n, c.cfg.Keys)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.written == nil {
		c.written = map[string]*corev1.Node{}
	}
	if old, ok := c.written[n.Name]; !ok || newerRV(n.ResourceVersion, old.ResourceVersion) {
		c.written[n.Name] = n
	}
}

// overlay returns the cached nodes as this process's writes leave them,
// and the nodes it is busy with. A node with a write on its way is shown
// as the write will leave it when that uses budget (an admission), and as
// it is when it frees budget (a completion, an uncordon): until a write
// lands it may still fail, and no admission may count on it. Written
// nodes replace older cached ones; writes the cache has caught up with
// are forgotten. One lock covers it all: a write landing between two
// looks would otherwise vanish from both (its node shown as the lagging
// cache has it, and not busy).
func (c *Controller) overlay(cached []*corev1.Node) ([]*corev1.Node, map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	busy := make(map[string]string, len(c.evicting)+len(c.queued))
	for node := range c.queued {
		busy[node] = busyWriting
	}
	for node := range c.evicting {
		busy[node] = busyEvicting
	}
	if len(c.written) == 0 && len(c.queued) == 0 {
		return cached, busy
	}
	out := make([]*corev1.Node, len(cached))
	for i, n := range cached {
		out[i] = n
		if w, ok := c.written[n.Name]; ok {
			if newerRV(w.ResourceVersion, n.ResourceVersion) {
				out[i] = w
			} else {
				delete(c.written, n.Name)
			}
		}
		for _, a := range c.queued[n.Name] {
			if !a.Change.Empty() && !freesBudget(a) {
				out[i] = a.Change.ApplyTo(out[i])
			}
		}
	}
	return out, busy
}

// newerRV compares resourceVersions. They are opaque to clients in
// general, but the API server's are etcd revisions, increasing integers;
// anything else compares as not newer, which only falls back to the cache.
func newerRV(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}
