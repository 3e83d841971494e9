// Package fleet plays the node side of thousands of KWOK nodes in one
// process: per node, the rebooter, the driver pod's entry gate and its
// health-watch, each through the product's own pure decision functions
// (reboot.Decide, health.Decide, the health Prober) against an in-memory
// machine (memhost), and the kubelet's part in a reboot (kubelet.go): the
// new boot ID, and the node's pods restarted in place. One shared informer
// per kind feeds every node, where the real agents would each hold their
// own watch: 5,000 watches would measure the simulator, not the rollout.
//
// It honours the node contract and reboot protocol of docs/architecture.md
// exactly: reboot bookkeeping before the reboot command, a new
// status.nodeInfo.bootID after it, the marker cleared and RebootCompleted
// after boot, the driver-version label once the driver pod loaded its
// version on the fresh boot, and
// driver-ready from the health-watch decision.
package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/budget"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/health"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/reboot"
	"github.com/openfuyao/npu-stack/tests/bench/memhost"
)

// Timing is the simulated per-node time of an upgrade. The drain of a
// node without workloads takes no time in the simulation, so a realistic
// drain is part of Reboot.
type Timing struct {
	// Reboot is from the reboot command to the new boot.
	Reboot time.Duration
	// DriverLoad is from the boot to the driver loaded (the driver pod's
	// container starts with the machine).
	DriverLoad time.Duration
}

// Total is the per-node time the physical limit counts.
func (t Timing) Total() time.Duration { return t.Reboot + t.DriverLoad }

// Config wires a Sim.
type Config struct {
	Client kubernetes.Interface
	Keys   contract.Keys
	// NodeSelector selects the NPU nodes to play.
	NodeSelector labels.Selector
	// Namespace is the chart's: its pods on a node (driver, device
	// plugin, exporter) are what the simulated kubelet restarts after a
	// reboot. DriverSelector picks the driver pods among them, whose
	// driver-version annotation is what a fresh boot loads.
	Namespace      string
	DriverSelector labels.Selector
	// Machine describes every machine; Machine.Driver is loaded at the
	// first boot.
	Machine simhost.Spec
	Workers int
	// HeartbeatEvery is how often each node's Lease is renewed (0:
	// DefaultHeartbeatEvery); it must stay well under the controller
	// manager's --node-monitor-grace-period.
	HeartbeatEvery time.Duration
	Clock          clock.WithTickerAndDelayedExecution
	// ProbeEvery is how often the health-watch of a machine whose last
	// probe failed probes again (0: DefaultProbeEvery); a healthy
	// machine's periodic probes change nothing and are not played.
	ProbeEvery time.Duration
	// Recorder receives the rebooter's Rebooting and RebootCompleted
	// events and the health-watch's (nil: none).
	Recorder reboot.Recorder
	Log      logrus.FieldLogger
}

// WedgedLabel on a node (value "true") gives it a machine whose chips
// never probe healthy, reboots included: its health-watch asks for a
// recovery reboot, which waits for an approval nobody gives (recovery is
// not automatic, the chart's default). A real fleet always has such a
// node.
const WedgedLabel = "bench.npu-stack.openfuyao.com/wedged"

// DefaultProbeEvery is Config.ProbeEvery's default: the chart's default
// probe interval scaled as the benchmark scales a node upgrade.
const DefaultProbeEvery = 2 * time.Second

// healthPolicy is the chart's default failure threshold.
var healthPolicy = health.Policy{FailureThreshold: 3}

// Stats count what the simulated nodes did.
type Stats struct {
	Reboots, DriverLoads, Writes, Conflicts, Errors int64
	// PodRestarts are pods the simulated kubelet restarted in place
	// after a reboot (the status write that starts them again).
	PodRestarts int64
	// ReadyReasserts are pods the node lifecycle controller had marked not
	// Ready (a late heartbeat) whose Ready the simulated kubelet wrote back.
	ReadyReasserts int64
	// HeartbeatMaxLag is the longest a bucket of node Leases was renewed
	// after its turn: near HeartbeatEvery, the controller manager's grace
	// period is at risk.
	HeartbeatMaxLag time.Duration
}

// Sim is the running fleet simulator.
type Sim struct {
	cfg    Config
	policy reboot.Policy
	nodes  corelisters.NodeLister
	pods   cache.Indexer
	synced []cache.InformerSynced
	start  []func(<-chan struct{})
	queue  workqueue.TypedRateLimitingInterface[string]

	mu       sync.Mutex
	timing   Timing
	machines map[string]*machine
	beat     *Heartbeat

	reboots, loads, writes, conflicts, errs, restarts atomic.Int64
	reasserts                                         atomic.Int64
}

// machine is one node's host plus the memory of its agent processes.
// The work queue never hands one key to two workers, so its fields need
// no lock.
type machine struct {
	host     *memhost.Host
	slotHeld bool      // rebooter: slots are unlimited in the simulation
	issuedAt time.Time // rebooter: when it ran the reboot command
	bootAt   time.Time // when the pending reboot completes
	loadAt   time.Time // driver pod: when the driver load completes
	health   health.State
	probed   bool      // health-watch: probed this boot
	probedAt string    // driver loaded when it last probed ("" none)
	lastOK   bool      // health-watch: the last probe's result
	lastTime time.Time // health-watch: when it last probed
	// kubelet: the pods to restart in place after the last reboot (nil:
	// none left, or no reboot yet).
	restart *restart
	// fresh is the node as the last node write of the current pass
	// returned it (nil: none since it was taken).
	fresh *corev1.Node
}

const byNode = "node"

// New sets up the informers; Run starts them and the workers.
func New(cfg Config) *Sim {
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	if cfg.HeartbeatEvery < renewTick {
		cfg.HeartbeatEvery = DefaultHeartbeatEvery
	}
	if cfg.ProbeEvery <= 0 {
		cfg.ProbeEvery = DefaultProbeEvery
	}
	s := &Sim{
		cfg: cfg,
		policy: reboot.Policy{
			// Recovery waits for an approval, as by the chart's default:
			// only the wedged node asks for one.
			Keys: cfg.Keys, AutoUpgrade: true, AutoRecover: false, MaxWedgedNodes: intstr.FromString("100%"),
			// The loop guard never trips: every node reboots once per
			// rollout, and rollouts are seconds apart at the least.
			Budget:       budget.Budget{Max: 10, Window: time.Second},
			IssueTimeout: time.Hour,
		},
		machines: map[string]*machine{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 5*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Clock: cfg.Clock}),
	}
	nodeF := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = cfg.NodeSelector.String()
	}))
	podF := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace(cfg.Namespace))
	ni, pi := nodeF.Core().V1().Nodes(), podF.Core().V1().Pods()
	s.nodes = ni.Lister()
	s.beat = NewHeartbeat(HeartbeatConfig{Client: cfg.Client, Every: cfg.HeartbeatEvery, Clock: cfg.Clock, Log: cfg.Log,
		Nodes: func() []*corev1.Node { ns, _ := s.nodes.List(labels.Everything()); return ns }})
	_ = pi.Informer().AddIndexers(cache.Indexers{byNode: func(obj any) ([]string, error) {
		return []string{obj.(*corev1.Pod).Spec.NodeName}, nil
	}})
	s.pods = pi.Informer().GetIndexer()
	_, _ = ni.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.enqueue(o) },
		UpdateFunc: func(_, o any) { s.enqueue(o) },
	})
	_, _ = pi.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.enqueuePod(o) },
		UpdateFunc: func(_, o any) { s.enqueuePod(o) },
		DeleteFunc: func(o any) { s.enqueuePod(o) },
	})
	s.synced = []cache.InformerSynced{ni.Informer().HasSynced, pi.Informer().HasSynced}
	s.start = []func(<-chan struct{}){nodeF.Start, podF.Start}
	return s
}

func (s *Sim) enqueue(obj any) {
	if n, ok := obj.(*corev1.Node); ok {
		s.queue.Add(n.Name)
	}
}

func (s *Sim) enqueuePod(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		s.queue.Add(p.Spec.NodeName)
	}
}

// SetTiming changes the per-node time for the reboots that start next.
func (s *Sim) SetTiming(t Timing) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timing = t
}

func (s *Sim) getTiming() Timing {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.timing
}

// Stats returns the counters so far.
func (s *Sim) Stats() Stats {
	return Stats{Reboots: s.reboots.Load(), DriverLoads: s.loads.Load(), Writes: s.writes.Load(),
		Conflicts: s.conflicts.Load(), Errors: s.errs.Load() + s.beat.Errors(), PodRestarts: s.restarts.Load(),
		ReadyReasserts: s.reasserts.Load(), HeartbeatMaxLag: s.beat.MaxLag()}
}

// Run plays the fleet until ctx ends; it returns once the informers are
// synced and the workers started, or with an error.
func (s *Sim) Run(ctx context.Context) error {
	for _, st := range s.start {
		st(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return fmt.Errorf("fleet simulator: informers did not sync: %w", ctx.Err())
	}
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	for i := 0; i < s.cfg.Workers; i++ {
		go s.work(ctx)
	}
	go s.beat.Run(ctx)
	return nil
}

func (s *Sim) work(ctx context.Context) {
	for {
		name, quit := s.queue.Get()
		if quit {
			return
		}
		after, err := s.sync(ctx, name)
		switch {
		case err != nil && ctx.Err() == nil:
			s.errs.Add(1)
			s.cfg.Log.WithError(err).WithField("node", name).Debug("simulated node step failed; retrying")
			s.queue.AddRateLimited(name)
		case after > 0:
			s.queue.Forget(name)
			s.queue.AddAfter(name, after)
		default:
			s.queue.Forget(name)
		}
		s.queue.Done(name)
	}
}

func (s *Sim) machine(name string, wedged bool) *machine {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.machines[name]
	if m == nil {
		m = &machine{host: memhost.New(s.cfg.Machine, s.cfg.Clock)}
		if wedged {
			m.host.WedgeForever()
		}
		s.machines[name] = m
	}
	return m
}

// maxRounds bounds the rounds of one pass.
const maxRounds = 4

// sync plays one pass of every agent of a node. The real agents are
// separate processes that act at once on the same boot, so a node write
// of one does not end the pass: the next agents go on from the written
// node (the write's response, newer than the cache), and another round
// follows while a round wrote the node. Waiting for each write's watch
// echo instead would chain the node's steps one API round trip apart,
// which the real node does not. Pod writes (the kubelet's) come back
// through the pod informer. It returns when to look again without a
// change (0: only on a change).
func (s *Sim) sync(ctx context.Context, name string) (time.Duration, error) {
	node, err := s.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		s.mu.Lock()
		delete(s.machines, name)
		s.mu.Unlock()
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("node %s from the cache: %w", name, err)
	}
	m := s.machine(name, node.Labels[WedgedLabel] == contract.True)
	now := s.cfg.Clock.Now()
	if m.host.RebootPending() {
		// The machine is down: none of its agents runs.
		if now.Before(m.bootAt) {
			return m.bootAt.Sub(now), nil
		}
		m.host.CompleteReboot()
		m.issuedAt, m.health, m.probed = time.Time{}, health.State{}, false
		// The driver pod's container starts with the machine, so its load
		// runs while the other agents report the boot.
		m.loadAt = now.Add(s.getTiming().DriverLoad)
		boot, _ := m.host.BootID()
		m.restart = s.podsAtBoot(name, boot)
	}
	m.fresh = nil
	var wake time.Duration
	for round := 0; round < maxRounds; round++ {
		wroteNode := false
		bootID, _ := m.host.BootID()
		// The kubelet's part. KWOK's status templates keep a boot ID once
		// set, but its first write may race with ours, so it is compared
		// on every pass rather than written once.
		if node.Status.NodeInfo.BootID != bootID {
			if err := s.patchBootID(ctx, m, name, bootID); err != nil {
				return wake, err
			}
			node, wroteNode = m.takeFresh(node), true
		}
		for _, step := range []struct {
			name string
			run  func(context.Context, *corev1.Node, *machine, time.Time) (time.Duration, bool, error)
		}{{"kubelet", s.kubelet}, {"rebooter", s.rebooter}, {"driver entry", s.driverEntry}, {"health-watch", s.healthWatch}} {
			after, wrote, err := step.run(ctx, node, m, now)
			wake = minPositive(wake, after)
			if err != nil {
				return wake, err
			}
			if m.fresh != nil {
				node, wroteNode = m.takeFresh(node), true
			}
			if wrote {
				s.cfg.Log.WithFields(logrus.Fields{"node": name, "step": step.name, "round": round, "rv": node.ResourceVersion}).Debug("simulated node: step wrote or waits")
			}
			if m.host.RebootPending() {
				// The machine went down: nothing else runs on it.
				return wake, nil
			}
		}
		if !wroteNode {
			break
		}
	}
	s.cfg.Log.WithFields(logrus.Fields{"node": name, "lookAgain": wake, "rv": node.ResourceVersion}).Debug("simulated node: pass ends")
	return wake, nil
}
