// Package steplat measures the rollout's step latency: for each node,
// from the moment the cluster allows a step (a slot in the parallelism
// budget freed, the node's new boot ID, its driver-ready and its pods
// Ready again after the reboot, driver-ready before a re-roll, or simply
// the previous step done) to the moment the rollout's write taking that
// step is seen. The rollout takes every step the cluster allows in one
// node patch, so one write may take several steps; each step with a cause
// of its own is measured against its cause. Both moments are receive times
// of watches in the benchmark process, so the watches' delivery delay
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

// PodSample is a pod of the node's stack (driver, device plugin,
// exporter): when it was first seen, every time it was seen becoming
// Ready (created Ready, or NotReady → Ready: its first start, and again
// after each in-place restart of its containers, same UID) or NotReady,
// and when it was seen deleted (zero: not).
type PodSample struct {
	Node       string
	FirstSeen  time.Time
	ReadyAt    []time.Time
	NotReadyAt []time.Time
	GoneAt     time.Time
}

// ReadyBy is when the pod last became Ready at or before t, if it is
// still Ready and not deleted at t.
func (p *PodSample) ReadyBy(t time.Time) (time.Time, bool) {
	if !p.GoneAt.IsZero() && !p.GoneAt.After(t) {
		return time.Time{}, false
	}
	last := func(ts []time.Time) (time.Time, bool) {
		for i := len(ts) - 1; i >= 0; i-- {
			if !ts[i].After(t) {
				return ts[i], true
			}
		}
		return time.Time{}, false
	}
	up, ok := last(p.ReadyAt)
	if down, wasDown := last(p.NotReadyAt); !ok || (wasDown && down.After(up)) {
		return time.Time{}, false
	}
	return up, true
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

// Take returns the samples so far and starts afresh from each node as
// last seen: a node's first write may take several steps (no state →
// reboot-required), so the next timelines need the state it left.
func (r *Recorder) Take() Timelines {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.t
	r.reset()
	for name, ss := range t.Nodes {
		if len(ss) > 0 {
			r.t.Nodes[name] = []NodeSample{ss[len(ss)-1]}
		}
	}
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

// PodHandler records the pods of the nodes' stack (the caller filters):
// a pod restarted in place keeps its UID, so each NotReady → Ready edge
// it goes through is kept, not only its first.
func (r *Recorder) PodHandler() cache.ResourceEventHandler {
	sample := func(p *corev1.Pod, now time.Time) *PodSample {
		s := r.t.Pods[string(p.UID)]
		if s == nil {
			s = &PodSample{Node: p.Spec.NodeName, FirstSeen: now}
			r.t.Pods[string(p.UID)] = s
		}
		return s
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			p, ok := obj.(*corev1.Pod)
			if !ok || p.Spec.NodeName == "" {
				return
			}
			now := r.now()
			r.mu.Lock()
			defer r.mu.Unlock()
			s := sample(p, now)
			if podReady(p) && len(s.ReadyAt) == 0 {
				s.ReadyAt = append(s.ReadyAt, now)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			p, ok := obj.(*corev1.Pod)
			old, okOld := oldObj.(*corev1.Pod)
			if !ok || !okOld || p.Spec.NodeName == "" {
				return
			}
			now := r.now()
			r.mu.Lock()
			defer r.mu.Unlock()
			s := sample(p, now)
			switch was, is := podReady(old), podReady(p); {
			case is && !was:
				s.ReadyAt = append(s.ReadyAt, now)
			case was && !is:
				s.NotReadyAt = append(s.NotReadyAt, now)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			p, ok := obj.(*corev1.Pod)
			if !ok || p.Spec.NodeName == "" {
				return
			}
			now := r.now()
			r.mu.Lock()
			defer r.mu.Unlock()
			sample(p, now).GoneAt = now
		},
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
