package peerrun

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// The node side of the peer's driver restart. GPU Operator's driver
// container unloads the old kernel modules and loads the new ones when its
// pod restarts: the node's per-node time. Meanwhile the validator, whose
// checks need the driver, is not Ready. KWOK runs no containers and marks
// a new pod Ready at once, so the simulation plays the restart with
// writes to the pods' status:
//
//   - when the node's driver pod goes (the library deleted it), the
//     validator is held: not Ready;
//   - its replacement from the DaemonSet is held (Running, not Ready: a
//     Running pod is out of KWOK's pod-ready stage) until the load time
//     has passed since it was first seen, then started (Ready);
//   - the validator starts (Ready) once the new driver pod is seen Ready.
//
// KWOK may mark the replacement Ready before the hold lands; the hold
// follows as soon as that write is seen, and the validator, held since
// the old pod went, gates the library's validation step meanwhile.

// nodeSim plays every node's restarts from one pod informer.
type nodeSim struct {
	client kubernetes.Interface
	pods   cache.Indexer
	queue  workqueue.TypedRateLimitingInterface[string]
	log    logrus.FieldLogger

	mu       sync.Mutex
	loadTime time.Duration
	nodes    map[string]*simNode
	writes   int
}

// simNode is one node's restart in progress. A node's key is never
// worked on by two workers at once, so its fields need no lock.
type simNode struct {
	driver    types.UID // the driver pod the node runs (loaded)
	reloading bool
	next      types.UID // the replacement being loaded
	loadAt    time.Time
}

const byNode = "node"

func startNodeSim(ctx context.Context, c kubernetes.Interface, ns string, log logrus.FieldLogger) (*nodeSim, error) {
	s := &nodeSim{client: c, log: log, nodes: map[string]*simNode{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 5*time.Second))}
	f := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	if err := inf.AddIndexers(cache.Indexers{byNode: func(o any) ([]string, error) { return []string{o.(*corev1.Pod).Spec.NodeName}, nil }}); err != nil {
		return nil, fmt.Errorf("peer node simulation: %w", err)
	}
	s.pods = inf.GetIndexer()
	enqueue := func(o any) {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			s.queue.Add(p.Spec.NodeName)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue}); err != nil {
		return nil, fmt.Errorf("peer node simulation: %w", err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("peer node simulation: pod informer did not sync: %w", ctx.Err())
	}
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	for range 16 {
		go s.work(ctx)
	}
	return s, nil
}

func (s *nodeSim) setLoadTime(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loadTime = d
}

func (s *nodeSim) work(ctx context.Context) {
	for {
		name, quit := s.queue.Get()
		if quit {
			return
		}
		after, err := s.sync(ctx, name)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.WithError(err).WithField("node", name).Debug("peer node simulation: retrying")
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

func (s *nodeSim) node(name string) *simNode {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[name]
	if n == nil {
		n = &simNode{}
		s.nodes[name] = n
	}
	return n
}

// sync plays one step of a node's restart; it returns when to look again
// without a change (0: on the next pod event).
func (s *nodeSim) sync(ctx context.Context, name string) (time.Duration, error) {
	n := s.node(name)
	drv, validators := s.podsOf(name)
	switch {
	case n.driver == "" && !n.reloading:
		// First sight: the pod of the install, loaded at first boot.
		if drv != nil {
			n.driver = drv.UID
		}
		return 0, nil
	case drv == nil || drv.UID == n.driver && drv.DeletionTimestamp != nil:
		// The driver pod goes: its driver stops with it.
		n.reloading = true
		return 0, s.setReady(ctx, validators, false)
	case drv.UID != n.driver && drv.UID != n.next:
		n.reloading, n.next = true, drv.UID
		s.mu.Lock()
		n.loadAt = time.Now().Add(s.loadTime)
		s.mu.Unlock()
	}
	if !n.reloading {
		return 0, nil
	}
	if err := s.setReady(ctx, validators, false); err != nil {
		return 0, err
	}
	if wait := time.Until(n.loadAt); wait > 0 {
		return wait, s.setReady(ctx, []*corev1.Pod{drv}, false)
	}
	if !ready(drv) {
		return 0, s.setReady(ctx, []*corev1.Pod{drv}, true)
	}
	// The driver pod is Ready as the cache shows it: the validator's
	// checks pass again.
	n.driver, n.next, n.reloading = drv.UID, "", false
	return 0, s.setReady(ctx, validators, true)
}

// podsOf is the node's newest driver pod and its validator pods.
func (s *nodeSim) podsOf(node string) (drv *corev1.Pod, validators []*corev1.Pod) {
	objs, _ := s.pods.ByIndex(byNode, node)
	for _, o := range objs {
		p := o.(*corev1.Pod)
		switch p.Labels["app"] {
		case driverApp:
			if drv == nil || p.CreationTimestamp.After(drv.CreationTimestamp.Time) || (drv.DeletionTimestamp != nil && p.DeletionTimestamp == nil) {
				drv = p
			}
		case validatorApp:
			if p.DeletionTimestamp == nil {
				validators = append(validators, p)
			}
		}
	}
	return drv, validators
}

// setReady writes the pods' status Running with Ready and their
// containers' readiness as given, for those that differ.
func (s *nodeSim) setReady(ctx context.Context, pods []*corev1.Pod, want bool) error {
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning && ready(p) == want && containersReady(p) == want {
			continue
		}
		body, err := readyPatch(p, want)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.writes++
		s.mu.Unlock()
		_, err = s.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("set pod %s/%s Ready=%t: %w", p.Namespace, p.Name, want, err)
		}
	}
	return nil
}

// Writes is the number of pod status writes the simulation made.
func (s *nodeSim) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

func readyPatch(p *corev1.Pod, want bool) ([]byte, error) {
	now := metav1.Now()
	cond := corev1.ConditionFalse
	if want {
		cond = corev1.ConditionTrue
	}
	var ctrs []corev1.ContainerStatus
	for _, c := range p.Spec.Containers {
		st := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: want, Started: &want,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}
		ctrs = append(ctrs, st)
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{
		"phase": corev1.PodRunning,
		"conditions": []corev1.PodCondition{
			{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		"containerStatuses": ctrs,
	}})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s status patch: %w", p.Namespace, p.Name, err)
	}
	return body, nil
}

func ready(p *corev1.Pod) bool { return condition(p, corev1.PodReady) }

func containersReady(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if !c.Ready {
			return false
		}
	}
	return true
}

func condition(p *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
