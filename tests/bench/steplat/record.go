// Package steplat measures the rollout's step latency: for each node,
// from the moment the cluster allows the next step (the node's new boot
// ID, driver-ready, its re-rolled pods Ready, a slot in the parallelism
// budget freed, or simply the previous step done) to the moment the
// rollout's write taking that step is seen. Both moments are receive times
// of one watch in the benchmark process, so the watch's delivery delay
// mostly cancels out; the resolution is that of the Go monotonic clock,
// the accuracy a few milliseconds of event delivery.
package steplat

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// NodeSample is a node as seen at At, reduced to what the steps read.
type NodeSample struct {
	At            time.Time
	State         string
	BootID        string
	DriverVersion string
	DriverReady   bool
	Rerolled      bool
}

// PodSample is a re-roll target pod: when it was first seen and when it
// was first seen Ready (zero: never).
type PodSample struct {
	Node      string
	FirstSeen time.Time
	ReadyAt   time.Time
}

// Timelines are the samples of one rollout.
type Timelines struct {
	Nodes map[string][]NodeSample
	Pods  map[string]*PodSample // by UID
}

// Recorder collects samples from informer events; safe for concurrent use.
type Recorder struct {
	keys contract.Keys
	now  func() time.Time
	mu   sync.Mutex
	t    Timelines
}

// NewRecorder records with the receive time given by now.
func NewRecorder(keys contract.Keys, now func() time.Time) *Recorder {
	r := &Recorder{keys: keys, now: now}
	r.reset()
	return r
}

func (r *Recorder) reset() {
	r.t = Timelines{Nodes: map[string][]NodeSample{}, Pods: map[string]*PodSample{}}
}

// Take returns the samples so far and starts afresh.
func (r *Recorder) Take() Timelines {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.t
	r.reset()
	return t
}

// NodeHandler records node changes.
func (r *Recorder) NodeHandler() cache.ResourceEventHandler {
	f := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		k := r.keys
		s := NodeSample{At: r.now(), State: n.Labels[k.UpgradeState()], BootID: n.Status.NodeInfo.BootID,
			DriverVersion: n.Labels[k.DriverVersion()], DriverReady: n.Labels[k.DriverReady()] == contract.True,
			Rerolled: n.Annotations[k.UpgradeRerolled()] != ""}
		r.mu.Lock()
		defer r.mu.Unlock()
		prev := r.t.Nodes[n.Name]
		if len(prev) > 0 && sameFacts(prev[len(prev)-1], s) {
			return
		}
		r.t.Nodes[n.Name] = append(prev, s)
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: f, UpdateFunc: func(_, o any) { f(o) }}
}

func sameFacts(a, b NodeSample) bool {
	a.At = b.At
	return a == b
}

// PodHandler records re-roll target pods (the caller filters).
func (r *Recorder) PodHandler() cache.ResourceEventHandler {
	f := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		now := r.now()
		r.mu.Lock()
		defer r.mu.Unlock()
		s := r.t.Pods[string(p.UID)]
		if s == nil {
			s = &PodSample{Node: p.Spec.NodeName, FirstSeen: now}
			r.t.Pods[string(p.UID)] = s
		}
		if s.ReadyAt.IsZero() && podReady(p) {
			s.ReadyAt = now
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: f, UpdateFunc: func(_, o any) { f(o) }}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
