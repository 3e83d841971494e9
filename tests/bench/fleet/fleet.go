// Package fleet plays the node side of thousands of KWOK nodes in one
// process: per node, the rebooter, the driver pod's entry gate and its
// health-watch, each through the product's own pure decision functions
// (reboot.Decide, health.Decide, the health Prober) against an in-memory
// machine (memhost), and the kubelet's part in a reboot (kubelet.go): the
// new boot ID, and the node's pods restarted in place. One shared informer
// per kind feeds every node, where the real agents would each hold their
// own watch: 5,000 watches would measure the simulator, not the rollout.
//
// It honours the node contract of DESIGN.md §3 and §5 exactly: reboot
// bookkeeping before the reboot command, a new status.nodeInfo.bootID after
// it, the marker cleared and RebootCompleted after boot, the driver-version
// label once the driver pod loaded its version on the fresh boot, and
// driver-ready from the health-watch decision.
package fleet

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/budget"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/driverentry"
	"github.com/openfuyao/npu-stack/internal/health"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/kube"
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

// takeFresh is the node a step of this pass last wrote (cur if none).
func (m *machine) takeFresh(cur *corev1.Node) *corev1.Node {
	n := m.fresh
	m.fresh = nil
	if n == nil {
		return cur
	}
	return n
}

func (s *Sim) patchBootID(ctx context.Context, m *machine, name, bootID string) error {
	body := fmt.Sprintf(`{"status":{"nodeInfo":{"bootID":%q}}}`, bootID)
	got, err := s.cfg.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status")
	s.writes.Add(1)
	if err != nil {
		return fmt.Errorf("patch the boot ID of node %s: %w", name, err)
	}
	m.fresh = got
	return nil
}

// rebooter is one pass of npu-rebooter's agent with unlimited slots.
func (s *Sim) rebooter(ctx context.Context, node *corev1.Node, m *machine, now time.Time) (time.Duration, bool, error) {
	k := s.cfg.Keys
	bootID, _ := m.host.BootID()
	uptime, _ := m.host.Uptime()
	for {
		act := reboot.Decide(reboot.Facts{Node: node, BootID: bootID, Uptime: uptime, SlotHeld: m.slotHeld, IssuedAt: m.issuedAt,
			Fleet: reboot.Fleet{NPUNodes: 1}}, s.policy, now)
		switch act.Kind {
		case reboot.Idle, reboot.Wait:
			return 0, false, nil
		case reboot.AcquireSlot:
			m.slotHeld = true
			continue
		case reboot.ReleaseSlot:
			m.slotHeld = false
			continue
		case reboot.Reboot:
			if act.Record {
				h, _ := budget.Parse(node.Annotations[k.RebootHistory()])
				change := kube.NodeChange{Annotations: map[string]*string{
					k.RebootFromBootID():    kube.Set(bootID),
					k.RebootStartedAt():     kube.Set(now.UTC().Format(time.RFC3339)),
					k.RebootHistory():       kube.Set(s.policy.Budget.Add(h, now).String()),
					k.RebootStartedReason(): kube.Set(string(act.Reason)),
				}}
				if act.ConsumeApproval {
					change.Annotations[k.ApproveReboot()] = nil
				}
				// A reboot whose bookkeeping did not land must not happen:
				// the real rebooter decides again on the newer node (the
				// rollout may have changed it, e.g. withdrawn the request).
				if wrote, err := s.patchIf(ctx, m, node, change); err != nil || !wrote {
					return 0, true, err
				}
			}
			if s.cfg.Recorder != nil {
				s.cfg.Recorder.Node(node, false, contract.EventRebooting, "rebooting node %s (reason=%s, method %s, boot ID %s)", node.Name, act.Reason, host.RebootSystemd, bootID)
			}
			if err := m.host.Reboot(ctx, host.RebootSystemd); err != nil {
				return 0, true, fmt.Errorf("reboot node %s: %w", node.Name, err)
			}
			s.reboots.Add(1)
			m.issuedAt = now
			t := s.getTiming()
			m.bootAt = now.Add(t.Reboot)
			return max(t.Reboot, time.Millisecond), true, nil
		case reboot.Complete:
			from := node.Annotations[k.RebootFromBootID()]
			change := kube.NodeChange{
				Labels: map[string]*string{k.RebootRequired(): nil},
				Annotations: map[string]*string{k.RebootReason(): nil, k.RebootFromBootID(): nil,
					k.RebootStartedAt(): nil, k.RebootStartedReason(): nil,
					// As the rebooter records the boot it left for the rollout.
					k.RebootedFromBootID(): kube.Set(from)},
			}
			if wrote, err := s.patchIf(ctx, m, node, change); err != nil || !wrote {
				return 0, true, err
			}
			m.slotHeld = false
			if s.cfg.Recorder != nil {
				s.cfg.Recorder.Node(node, false, contract.EventRebootCompleted, "node %s rebooted (reason=%s, boot ID %s -> %s); reboot marker cleared, slot released",
					node.Name, act.Reason, from, bootID)
			}
			return 0, true, nil
		default:
			// Cordon, Uncordon, Fail belong to recoveries and failed
			// reboot commands, which the benchmark does not stage.
			return 0, true, fmt.Errorf("node %s: the simulated rebooter does not stage %s (%s)", node.Name, act.Kind, act.Why)
		}
	}
}

// healthWatch is the sidecar's probe: at boot, at once when the driver
// entry loads a driver (the marker appearing), as the real watch does,
// and every ProbeEvery while the last probe failed; the periodic probes
// of a healthy machine change nothing. A failed probe counts towards the
// failure threshold once, as the real watch's does.
func (s *Sim) healthWatch(ctx context.Context, node *corev1.Node, m *machine, now time.Time) (time.Duration, bool, error) {
	loaded, _ := m.host.LoadedDriver(ctx)
	probed := false
	failing := !m.lastOK && loaded != "" // without a driver a probe fails and counts for nothing
	if !m.probed || m.probedAt != loaded || failing && !now.Before(m.lastTime.Add(s.cfg.ProbeEvery)) {
		r := health.Prober{Host: m.host, Clock: s.cfg.Clock, Timeout: 10 * time.Second}.Probe(ctx, 0)
		m.probed, m.probedAt, m.lastOK, m.lastTime, probed = true, loaded, r.OK, now, true
	}
	var wake time.Duration
	if !m.lastOK && loaded != "" {
		wake = max(m.lastTime.Add(s.cfg.ProbeEvery).Sub(now), time.Millisecond)
		if !probed {
			return wake, false, nil
		}
	}
	k := s.cfg.Keys
	obs := health.Observation{
		Probe:  health.Result{OK: m.lastOK, Reason: "simulated chips report Health Critical"},
		Marker: loaded != "",
		Node: health.NodeView{RebootRequired: node.Labels[k.RebootRequired()] == contract.True,
			RebootReason: node.Annotations[k.RebootReason()], DriverReady: node.Labels[k.DriverReady()]},
	}
	st, acts := health.Decide(healthPolicy, m.health, obs)
	m.health = st
	change := kube.NodeChange{Labels: map[string]*string{}, Annotations: map[string]*string{}}
	if acts.DriverReady != nil {
		change.Labels[k.DriverReady()] = kube.Set(strconv.FormatBool(*acts.DriverReady))
	}
	switch {
	case acts.RequestRecovery:
		change.Labels[k.RebootRequired()] = kube.Set(contract.True)
		change.Annotations[k.RebootReason()] = kube.Set(string(contract.ReasonRecovery))
	case acts.WithdrawRecovery:
		change.Labels[k.RebootRequired()] = nil
		change.Annotations[k.RebootReason()] = nil
	}
	if len(change.Labels) == 0 && len(change.Annotations) == 0 {
		return wake, false, nil
	}
	if err := s.patch(ctx, m, node.Name, change); err != nil {
		return wake, true, err
	}
	if s.cfg.Recorder != nil {
		for _, e := range acts.Events {
			s.cfg.Recorder.Node(node, e.Warning, e.Reason, "%s", e.Message)
		}
	}
	return wake, true, nil
}

// driverEntry is the driver pod's gate: on a fresh boot it loads the
// version of the driver pod on the node; otherwise it reports what is
// loaded.
func (s *Sim) driverEntry(ctx context.Context, node *corev1.Node, m *machine, now time.Time) (time.Duration, bool, error) {
	k := s.cfg.Keys
	loaded, _ := m.host.LoadedDriver(ctx)
	if loaded == "" {
		pod := s.driverPod(node.Name)
		if pod == nil {
			return 0, true, nil // the pod's arrival brings the node back
		}
		if m.loadAt.IsZero() {
			m.loadAt = now.Add(s.getTiming().DriverLoad)
		}
		if now.Before(m.loadAt) {
			return m.loadAt.Sub(now), true, nil
		}
		loaded = pod.Annotations[k.DriverSpecVersion()]
		if err := m.host.InstallDriver(ctx, loaded, nil); err != nil {
			return 0, true, fmt.Errorf("driver pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		s.loads.Add(1)
	}
	if pod := s.driverPod(node.Name); pod != nil && driverentry.StageNow(node, k) {
		// The install over the loaded driver before the reboot: one write,
		// the record the rebooter waits for. The boot's load keeps its
		// DriverLoad time after the reboot.
		if want := pod.Annotations[k.DriverSpecVersion()]; want != loaded && node.Annotations[k.InstalledDriver()] != want {
			return 0, true, s.patch(ctx, m, node.Name, kube.NodeChange{Annotations: map[string]*string{k.InstalledDriver(): kube.Set(want)}})
		}
	}
	if node.Labels[k.DriverVersion()] == loaded && node.Annotations[k.InstalledDriver()] != "" {
		return 0, false, nil
	}
	return 0, true, s.patch(ctx, m, node.Name, kube.NodeChange{Labels: map[string]*string{k.DriverVersion(): kube.Set(loaded)},
		Annotations: map[string]*string{k.InstalledDriver(): kube.Set(loaded)}})
}

// driverPod is the node's running driver pod, if any.
func (s *Sim) driverPod(node string) *corev1.Pod {
	objs, _ := s.pods.ByIndex(byNode, node)
	var best *corev1.Pod
	for _, o := range objs {
		p := o.(*corev1.Pod)
		if !s.isDriver(p) || p.DeletionTimestamp != nil {
			continue
		}
		if best == nil || p.CreationTimestamp.After(best.CreationTimestamp.Time) {
			best = p
		}
	}
	return best
}

func (s *Sim) patch(ctx context.Context, m *machine, name string, change kube.NodeChange) error {
	s.writes.Add(1)
	got, err := kube.PatchNode(ctx, s.cfg.Client, name, change)
	if err != nil {
		return err
	}
	m.fresh = got
	return nil
}

// patchIf writes at the node's resourceVersion; wrote is false on a
// conflict, which means the informer has a newer node on its way, which
// brings the node back.
func (s *Sim) patchIf(ctx context.Context, m *machine, node *corev1.Node, change kube.NodeChange) (wrote bool, err error) {
	s.writes.Add(1)
	got, err := kube.PatchNodeIf(ctx, s.cfg.Client, node.Name, node.ResourceVersion, change)
	if apierrors.IsConflict(err) {
		s.conflicts.Add(1)
		s.cfg.Log.WithField("node", node.Name).Debug("simulated node: conflict; deciding again on the newer node")
		return false, nil
	}
	if err != nil {
		return false, err
	}
	m.fresh = got
	return true, nil
}
