// Package procnode is a stand-in kubelet for tests: pods bound to its node
// whose images are npu-stack's own binaries run as real local processes,
// other containers are simulated as running, and the machine underneath is
// a simhost. It is deliberately small: enough for the Job controller, the
// DaemonSet controller and Helm's waits to see real pod lifecycles.
package procnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

const (
	nodeIP = "127.0.0.1"
	// ProcessNodeLabel marks nodes whose pods run as processes.
	ProcessNodeLabel = "npu-stack.test/process-node"
	heartbeatPeriod  = 10 * time.Second
	rebootKey        = "\x00reboot"
)

// Config describes one process-backed node.
type Config struct {
	Client     kubernetes.Interface
	RESTConfig *rest.Config // API server address and CA for the pods' kubeconfigs
	Name       string
	Labels     map[string]string
	// ImageDir caches the executables taken from pulled images; nodes may
	// share it.
	ImageDir string
	// Dir holds the node's simulated host and its pods' files and logs.
	Dir  string
	Host simhost.Spec
	// PodIP, if set, is the address of this node's pods (podip.go):
	// their status.podIP, and where their listening flags bind. Default:
	// the node's address, which every process node shares.
	PodIP string
}

// Node is a running process-backed node.
type Node struct {
	cfg    Config
	host   *simhost.Host
	queue  workqueue.TypedRateLimitingInterface[string]
	store  cache.Store
	cancel context.CancelFunc
	done   chan struct{}
	pods   map[string]*podRun // owned by the worker goroutine
	images *images
	nri    *nriRuntime

	statusMu sync.Mutex
	ready    bool

	// lost: the next reboot never completes; gone: it happened.
	lost, gone atomic.Bool
	// bootIDDelay (a time.Duration): how long after a reboot the node
	// reports its new boot ID (DelayBootIDReport).
	bootIDDelay atomic.Int64
	// downtime (a time.Duration): how long a reboot keeps the machine
	// down (SetRebootDowntime).
	downtime atomic.Int64
	// bootIDHold, if set, must hold of the Node before bootIDDelay
	// starts (guarded by statusMu).
	bootIDHold func(*corev1.Node) bool
}

// Start registers the node, marks it Ready and starts running its pods.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "pods"), 0o755); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	h, err := simhost.Create(filepath.Join(cfg.Dir, "host"), cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	n := &Node{
		cfg:    cfg,
		host:   h,
		queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		pods:   map[string]*podRun{},
		images: &images{client: cfg.Client, arch: nodeArch(cfg.Labels), dir: cfg.ImageDir, cache: map[string]pulled{}},
		done:   make(chan struct{}),
		ready:  true,
	}
	n.nri = &nriRuntime{host: h, dir: cfg.Dir}
	if err := n.nri.start(); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	port, closeAPI, err := n.serveKubeletAPI()
	if err != nil {
		n.nri.stop()
		return nil, err
	}
	if err := n.register(ctx, port); err != nil {
		closeAPI()
		n.nri.stop()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { <-runCtx.Done(); closeAPI(); n.nri.stop() }()

	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.Name).String()
	}))
	inf := factory.Core().V1().Pods().Informer()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			n.queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("node %s: pod handler: %w", cfg.Name, err)
	}
	n.store = inf.GetStore()
	factory.Start(runCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		cancel()
		return nil, fmt.Errorf("node %s: pod informer did not sync", cfg.Name)
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); n.work(runCtx) }()
	go func() { defer wg.Done(); n.heartbeat(runCtx) }()
	go func() { defer wg.Done(); n.watchReboots(runCtx) }()
	go func() {
		<-runCtx.Done()
		n.queue.ShutDown()
		wg.Wait()
		factory.Shutdown()
		close(n.done)
	}()
	return n, nil
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Host is the node's simulated machine, for fault injection.
func (n *Node) Host() *simhost.Host { return n.host }

// Stop kills every pod process and stops managing the node. The Node
// object stays; it goes NotReady as a dead kubelet's would.
func (n *Node) Stop() {
	n.cancel()
	<-n.done
	for _, r := range n.pods {
		r.kill(0)
	}
}

// nodeArch is the architecture the node reports (kubernetes.io/arch): the
// platform its images must offer. Default this machine's, whose
// processes its pods run: a test bed that built this machine's images
// alone (the demo's) then has every image its nodes pull.
func nodeArch(labels map[string]string) string {
	if a := labels[corev1.LabelArchStable]; a != "" {
		return a
	}
	return goruntime.GOARCH
}

func (n *Node) register(ctx context.Context, kubeletPort int) error {
	bootID, err := n.host.BootID()
	if err != nil {
		return err
	}
	labels := map[string]string{
		corev1.LabelHostname:   n.cfg.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: nodeArch(n.cfg.Labels),
		ProcessNodeLabel:       "true",
	}
	for k, v := range n.cfg.Labels {
		labels[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.cfg.Name, Labels: labels},
	}
	if _, err := n.cfg.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("register node %s: %w", n.cfg.Name, err)
	}
	return n.setStatus(ctx, func(s *corev1.NodeStatus) {
		s.Capacity = capacity
		s.Allocatable = capacity
		s.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}, {Type: corev1.NodeHostName, Address: n.cfg.Name}}
		s.DaemonEndpoints.KubeletEndpoint.Port = int32(kubeletPort)
		s.NodeInfo = corev1.NodeSystemInfo{BootID: bootID, OperatingSystem: "linux", Architecture: nodeArch(n.cfg.Labels), KubeletVersion: "v1.37.1", KernelVersion: n.cfg.Labels["npu.openfuyao.com/kernel"]}
	})
}

// setStatus writes the Ready condition (from n.ready) and whatever change
// adds, retrying on conflicts with the node lifecycle controller.
func (n *Node) setStatus(ctx context.Context, change func(*corev1.NodeStatus)) error {
	n.statusMu.Lock()
	defer n.statusMu.Unlock()
	// The rollout, the agents and the node lifecycle controller all write
	// this Node; DefaultBackoff outlasts their bursts where DefaultRetry's
	// 50 ms does not.
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := n.cfg.Client.CoreV1().Nodes().Get(ctx, n.cfg.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if change != nil {
			change(&node.Status)
		}
		now := metav1.Now()
		cond := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "process-backed node is ready", LastHeartbeatTime: now, LastTransitionTime: now}
		if !n.ready {
			cond.Status, cond.Reason, cond.Message = corev1.ConditionFalse, "KubeletNotReady", "node is rebooting"
		}
		replaced := false
		for i, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == cond.Status {
					cond.LastTransitionTime = c.LastTransitionTime
				}
				node.Status.Conditions[i] = cond
				replaced = true
			}
		}
		if !replaced {
			node.Status.Conditions = append(node.Status.Conditions, cond)
		}
		_, err = n.cfg.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("node %s status: %w", n.cfg.Name, err)
	}
	return nil
}

// heartbeat keeps the node lease and Ready condition fresh, as the kubelet
// does, so the node lifecycle controller never marks the node unreachable.
func (n *Node) heartbeat(ctx context.Context) {
	leases := n.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	t := time.NewTicker(heartbeatPeriod)
	defer t.Stop()
	for {
		now := metav1.NewMicroTime(time.Now())
		lease, err := leases.Get(ctx, n.cfg.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, _ = leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: n.cfg.Name},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.cfg.Name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
			}, metav1.CreateOptions{})
		case err == nil:
			lease.Spec.RenewTime = &now
			_, _ = leases.Update(ctx, lease, metav1.UpdateOptions{})
		}
		if err := n.setStatus(ctx, nil); err != nil && ctx.Err() == nil {
			fmt.Fprintf(os.Stderr, "procnode: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (n *Node) work(ctx context.Context) {
	for {
		key, shutdown := n.queue.Get()
		if shutdown {
			return
		}
		var err error
		if key == rebootKey {
			err = n.reboot(ctx)
		} else {
			err = n.sync(ctx, key)
		}
		switch {
		case err == nil:
			n.queue.Forget(key)
		case ctx.Err() != nil || errors.Is(err, context.Canceled):
		case apierrors.IsConflict(err):
			// The informer has not seen our last write yet; retry quietly.
			n.queue.AddRateLimited(key)
		default:
			fmt.Fprintf(os.Stderr, "procnode %s: %s: %v\n", n.cfg.Name, key, err)
			n.queue.AddRateLimited(key)
		}
		n.queue.Done(key)
	}
}

// waitNode watches this node's Node object until cond holds.
func (n *Node) waitNode(ctx context.Context, cond func(*corev1.Node) bool) error {
	sel := fields.OneTermEqualSelector("metadata.name", n.cfg.Name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return n.cfg.Client.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return n.cfg.Client.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, nil, func(e watch.Event) (bool, error) {
		node, ok := e.Object.(*corev1.Node)
		return ok && cond(node), nil
	})
	return err
}
