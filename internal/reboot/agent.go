package reboot

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/slots"
)

// Recorder emits Events on Nodes (kube.Recorder in production).
type Recorder interface {
	Node(node *corev1.Node, warning bool, reason contract.EventReason, format string, args ...any)
}

// Config is everything the Agent needs.
type Config struct {
	NodeName  string
	Namespace string // of the slot Leases
	Policy    Policy
	Method    host.RebootMethod
	// RebootAttempts bounds the failed attempts of one pending reboot
	// with Method (0 = DefaultRebootAttempts); then FallbackMethod gets
	// one attempt if set, and the agent stops trying and says so.
	RebootAttempts int
	// FallbackMethod ("" or "none" = none) is tried once Method has failed
	// RebootAttempts times: sysrq where AppArmor or SELinux keep systemd's
	// bus out of reach.
	FallbackMethod host.RebootMethod
	// NPUNodeSelector selects the NPU nodes the storm protection counts.
	NPUNodeSelector labels.Selector
	Slots           int
	SlotTTL         time.Duration
	// RecoveryDrainTimeout bounds the wait for the NPU pods of a wedged
	// node before its recovery reboot (0: DefaultRecoveryDrainTimeout).
	RecoveryDrainTimeout time.Duration
	// MetricsAddr serves /metrics; "" turns it off.
	MetricsAddr string
	// Resync re-evaluates the node this often even without a change.
	Resync time.Duration

	Client   kubernetes.Interface
	Metadata metadata.Interface // for counting NPU nodes; only with AutoRecover
	Host     host.Host
	Clock    clock.WithTicker
	Recorder Recorder
	Log      logrus.FieldLogger
}

const (
	queueKey = "node"
	// The backoff after a failed reboot or eviction; a failure never
	// turns into a tight loop.
	minBackoff = 30 * time.Second
	maxBackoff = 10 * time.Minute
	// The requester (rollout, health-watch) usually emits RebootRequired
	// itself, a moment after it sets the label; the rebooter emits it only
	// if none shows up within announceGrace, so that there is one event
	// per pending reboot.
	announceGrace = 5 * time.Second
	// How long a reboot waits for that event to be visible before going
	// ahead anyway: it must not be lost to the reboot, but a broken event
	// API must not block a recovery.
	announceVisible = 10 * time.Second
)

// Agent is one node's rebooter.
type Agent struct {
	cfg     Config
	keys    contract.Keys
	slots   *slots.Slots
	metrics *Metrics
	queue   workqueue.TypedRateLimitingInterface[string]

	nodes  cache.Store
	leases cache.Store
	fleet  cache.Store // nil without AutoRecover: the NPU nodes asking for a reboot
	// size and sizedAt: the last count of the NPU nodes (fleetSize); the
	// one worker goroutine reads and writes them.
	size    int
	sizedAt time.Time

	// Per-process memory; everything else is read from the node.
	issuedAt     time.Time
	retryAt      time.Time
	failures     int
	announced    string // bootID/reason whose RebootRequired event is visible
	emitted      string // bootID/reason whose RebootRequired event we emitted
	pendingKey   string // bootID/reason of the pending reboot first seen at pendingSince
	pendingSince time.Time
	lastCause    Cause
	lastSlotMsg  string
	// drainedFor is the pending reboot (pendingKey) whose NPU pods were
	// evicted while it waits for its maintenance window.
	drainedFor string
}

// New validates cfg and builds an Agent.
func New(cfg Config) (*Agent, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("rebooter: --node-name is required (the chart passes $(NODE_NAME) from the downward API)")
	}
	if _, err := host.ParseRebootMethod(string(cfg.Method)); err != nil {
		return nil, fmt.Errorf("rebooter: --method: %w", err)
	}
	if cfg.FallbackMethod == "none" {
		cfg.FallbackMethod = ""
	}
	if cfg.FallbackMethod != "" {
		m, err := host.ParseRebootMethod(string(cfg.FallbackMethod))
		if err != nil {
			return nil, fmt.Errorf("rebooter: --fallback-method: %w", err)
		}
		cfg.FallbackMethod = m
	}
	if cfg.RebootAttempts <= 0 {
		cfg.RebootAttempts = DefaultRebootAttempts
	}
	if cfg.Policy.IssueTimeout <= 0 {
		cfg.Policy.IssueTimeout = 5 * time.Minute
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 5 * time.Minute
	}
	if cfg.RecoveryDrainTimeout < 0 {
		return nil, fmt.Errorf("rebooter: --recovery-drain-timeout %s must not be negative (recoveryPolicy.drainTimeoutSeconds)", cfg.RecoveryDrainTimeout)
	}
	if cfg.RecoveryDrainTimeout == 0 {
		cfg.RecoveryDrainTimeout = DefaultRecoveryDrainTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = logrus.New()
	}
	cfg.Log = cfg.Log.WithField("node", cfg.NodeName)
	if cfg.Policy.AutoRecover && cfg.Metadata == nil {
		return nil, errors.New("rebooter: --auto-recover needs a metadata client to count wedged NPU nodes")
	}
	s, err := slots.New(slots.Config{Client: cfg.Client, Namespace: cfg.Namespace, Count: cfg.Slots, TTL: cfg.SlotTTL, Holder: cfg.NodeName, Clock: cfg.Clock})
	if err != nil {
		return nil, err
	}
	return &Agent{
		cfg:     cfg,
		keys:    cfg.Policy.Keys,
		slots:   s,
		metrics: NewMetrics(cfg.NodeName),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 2*time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Clock: cfg.Clock}),
	}, nil
}

// Metrics are the agent's Prometheus metrics.
func (a *Agent) Metrics() *Metrics { return a.metrics }

// Run watches the node until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	defer a.queue.ShutDown()
	// The informers stop when Run returns, for whatever reason, and Run
	// waits for them.
	ctx, cancel := context.WithCancel(ctx)
	var watches sync.WaitGroup
	defer watches.Wait()
	defer cancel()
	enqueue := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.queue.Add(queueKey) },
		UpdateFunc: func(any, any) { a.queue.Add(queueKey) },
		DeleteFunc: func(any) { a.queue.Add(queueKey) },
	}
	var synced []cache.InformerSynced

	// One node and one namespace's slot Leases: the typed informers
	// alone, not the factory of every API group, which the agent would
	// map into memory on every node for nothing.
	nodeInf := coreinformers.NewFilteredNodeInformer(a.cfg.Client, a.cfg.Resync, cache.Indexers{},
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.cfg.NodeName).String()
		})
	leaseInf := coordinationinformers.NewFilteredLeaseInformer(a.cfg.Client, a.cfg.Namespace, a.cfg.Resync, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = slots.Selector().String() })
	for _, inf := range []cache.SharedIndexInformer{nodeInf, leaseInf} {
		if _, err := inf.AddEventHandler(enqueue); err != nil {
			return fmt.Errorf("rebooter on node %s: watch: %w", a.cfg.NodeName, err)
		}
		synced = append(synced, inf.HasSynced)
	}
	a.nodes, a.leases = nodeInf.GetStore(), leaseInf.GetStore()
	watches.Go(func() { nodeInf.RunWithContext(ctx) })
	watches.Go(func() { leaseInf.RunWithContext(ctx) })

	if a.cfg.Policy.AutoRecover {
		fleetInf, err := a.watchFleet()
		if err != nil {
			return err
		}
		synced = append(synced, fleetInf.HasSynced)
		watches.Go(func() { fleetInf.RunWithContext(ctx) })
	}

	if a.cfg.MetricsAddr != "" {
		stop, err := a.serveMetrics(ctx)
		if err != nil {
			return err
		}
		defer stop()
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("rebooter on node %s: caches did not sync: %w", a.cfg.NodeName, context.Cause(ctx))
	}
	a.cfg.Log.WithFields(logrus.Fields{"autoUpgrade": a.cfg.Policy.AutoUpgrade, "autoRecover": a.cfg.Policy.AutoRecover,
		"slots": a.cfg.Slots, "slotTTL": a.cfg.SlotTTL, "uptimeGuard": a.cfg.Policy.UptimeGuard}).Info("rebooter watching its node")
	a.queue.Add(queueKey)
	go func() {
		<-ctx.Done()
		a.queue.ShutDown()
	}()
	for {
		key, shutdown := a.queue.Get()
		if shutdown {
			return nil
		}
		after, err := a.sync(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			a.cfg.Log.WithError(err).Warn("sync failed; retrying")
			a.queue.AddRateLimited(key)
		case after > 0:
			a.queue.Forget(key)
			a.queue.AddAfter(key, after)
		default:
			a.queue.Forget(key)
		}
		a.queue.Done(key)
	}
}

func (a *Agent) serveMetrics(ctx context.Context) (func(), error) {
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", a.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("rebooter on node %s: serve metrics on %s (change --metrics-addr, or set it empty to turn metrics off): %w", a.cfg.NodeName, a.cfg.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.metrics.Registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	a.cfg.Log.Infof("metrics on %s/metrics", lis.Addr())
	return func() {
		shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutCtx)
	}, nil
}

// sync decides and carries out one step; it returns when to look again
// (0: on the next change).
func (a *Agent) sync(ctx context.Context) (time.Duration, error) {
	obj, ok, err := a.nodes.GetByKey(a.cfg.NodeName)
	if err != nil {
		return 0, fmt.Errorf("read node %s from the watch cache: %w", a.cfg.NodeName, err)
	}
	if !ok {
		return 0, fmt.Errorf("node %s is not in the watch cache: was it deleted, or does --node-name not match the Node's name?", a.cfg.NodeName)
	}
	node := obj.(*corev1.Node)
	f, err := a.facts(ctx, node)
	if err != nil {
		return 0, err
	}
	now := a.cfg.Clock.Now()
	act := Decide(f, a.cfg.Policy, now)
	a.observe(node, f, act, now)
	log := a.cfg.Log.WithFields(logrus.Fields{"action": act.Kind, "reason": act.Reason})
	if act.Kind != Idle && act.Kind != Wait {
		log.Info(act.Why)
	} else {
		log.Debug(act.Why)
	}
	var announceIn time.Duration
	if node.Labels[a.keys.RebootRequired()] == contract.True && node.Annotations[a.keys.RebootFromBootID()] == "" {
		var announced bool
		announced, err = a.announce(ctx, node, f, act.Reason, now)
		if err != nil {
			log.WithError(err).Warn("cannot check for the RebootRequired event")
		}
		// Look again soon until the event shows up, but not forever: a
		// broken event API must not turn into a polling loop.
		if !announced && now.Before(a.pendingSince.Add(announceGrace+announceVisible)) {
			announceIn = time.Second
		}
	}
	after, err := a.do(ctx, node, act, now)
	if announceIn > 0 && err == nil && (after == 0 || after > announceIn) {
		after = announceIn
	}
	return after, err
}

// do carries out act.
func (a *Agent) do(ctx context.Context, node *corev1.Node, act Action, now time.Time) (time.Duration, error) {
	switch act.Kind {
	case Idle:
		a.resetPending()
		return 0, nil
	case Wait:
		a.report(node, act)
		if act.Drain {
			if err := a.drainWhileWaiting(ctx, node); err != nil {
				return 0, err
			}
		}
		if act.Until.IsZero() {
			return 0, nil
		}
		return max(act.Until.Sub(now), time.Second), nil
	case ReleaseSlot:
		if err := a.slots.Release(ctx); err != nil {
			return 0, err
		}
		return time.Millisecond, nil
	case AcquireSlot:
		return a.acquire(ctx, node, act, now)
	case Cordon:
		change := kube.NodeChange{
			Unschedulable: ptrTo(true),
			Annotations:   map[string]*string{a.keys.RecoveryCordoned(): kube.Set(contract.True), a.keys.RecoveryWasCordoned(): nil},
		}
		if act.AdminCordoned {
			change.Annotations[a.keys.RecoveryWasCordoned()] = kube.Set(contract.True)
		}
		if _, err := kube.PatchNodeIf(ctx, a.cfg.Client, node.Name, node.ResourceVersion, change); err != nil {
			return conflictRetry(err, fmt.Errorf("cordon node %s for its recovery reboot: %w", node.Name, err))
		}
		return 0, nil
	case Reboot:
		return a.reboot(ctx, node, act)
	case Fail:
		a.fail(ctx, node, act.Reason, errors.New(act.Why))
		return a.retryAt.Sub(now), nil
	case Complete:
		return a.complete(ctx, node, act)
	case Uncordon:
		change := kube.NodeChange{Annotations: map[string]*string{a.keys.RecoveryCordoned(): nil, a.keys.RecoveryWasCordoned(): nil}}
		if !act.KeepCordoned {
			change.Unschedulable = ptrTo(false)
		}
		// Conditional on the version decided on: the rollout may take or
		// let go of its own hold meanwhile, and one of the two owners must
		// see the other gone to uncordon.
		if _, err := kube.PatchNodeIf(ctx, a.cfg.Client, node.Name, node.ResourceVersion, change); err != nil {
			return conflictRetry(err, fmt.Errorf("uncordon node %s after its recovery: %w", node.Name, err))
		}
		a.cfg.Log.Info("recovery finished: " + act.Why)
		return 0, nil
	case Settle:
		change := kube.NodeChange{Annotations: map[string]*string{a.keys.RebootHistory(): kube.Set(act.History.String())}}
		if _, err := kube.PatchNodeIf(ctx, a.cfg.Client, node.Name, node.ResourceVersion, change); err != nil {
			return conflictRetry(err, fmt.Errorf("record on node %s what its last reboot achieved: %w", node.Name, err))
		}
		return 0, nil
	}
	return 0, fmt.Errorf("rebooter on node %s: unknown action %v", node.Name, act.Kind)
}

// conflictRetry turns a Conflict (the node changed under a decision) into
// an immediate re-decision instead of an error.
func conflictRetry(err, wrapped error) (time.Duration, error) {
	if apierrors.IsConflict(err) {
		return time.Millisecond, nil
	}
	return 0, wrapped
}

func ptrTo[T any](v T) *T { return &v }
