package kube

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/contract"
)

const (
	// eventWriters write Events in parallel: one at a time would bound a
	// rollout's first decision (an Event per node) by round trips.
	eventWriters = 4
	// eventTries per Event on transport errors, as client-go retries.
	eventTries = 5
	// eventRetryDelay is the first pause between tries; it doubles.
	eventRetryDelay = 200 * time.Millisecond
	// ShutdownGrace bounds how long Shutdown writes pending Events.
	ShutdownGrace = 15 * time.Second
)

// Recorder emits Events about Nodes. It keeps client-go's correlation
// (repeats become a count on one Event, a per-object spam filter) but not
// its broadcaster, which drops Events past a queue of 1,000 — a
// rollout's first decision alone records one per node — and whose
// Shutdown abandons what is still queued: the last transitions of a
// finished rollout would be missing. Here the queue is unbounded and
// Shutdown writes what is pending, within ShutdownGrace.
type Recorder struct {
	sink       record.EventSink
	source     corev1.EventSource
	clock      clock.Clock
	correlator *record.EventCorrelator
	ctx        context.Context
	cancel     context.CancelFunc
	workers    sync.WaitGroup

	mu      sync.Mutex
	cond    *sync.Cond
	pending []*corev1.Event
	closed  bool
}

// NewRecorder starts writing Events as component (the event's source).
// Call Shutdown before the process exits.
func NewRecorder(client kubernetes.Interface, component string) *Recorder {
	ctx, cancel := context.WithCancel(context.Background())
	c := clock.RealClock{}
	r := &Recorder{
		sink:       &typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")},
		source:     corev1.EventSource{Component: component},
		clock:      c,
		correlator: record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{Clock: c}),
		ctx:        ctx, cancel: cancel,
	}
	r.cond = sync.NewCond(&r.mu)
	for range eventWriters {
		r.workers.Add(1)
		go r.write()
	}
	return r
}

// Node records an event on node. Node events live in the default
// namespace, where `kubectl get events -A` and `kubectl describe node` find
// them.
func (r *Recorder) Node(node *corev1.Node, warning bool, reason contract.EventReason, format string, args ...any) {
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	now := metav1.Time{Time: r.clock.Now()}
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: util.GenerateEventName(node.Name, now.UnixNano()), Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node.Name, UID: node.UID, APIVersion: "v1"},
		Reason:         string(reason), Message: fmt.Sprintf(format, args...), Type: typ,
		FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: r.source,
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		utilruntime.HandleError(fmt.Errorf("event %s on node %s recorded after shutdown; not written", reason, node.Name))
		return
	}
	r.pending = append(r.pending, ev)
	r.cond.Signal()
}

// NodeByName records an event on a node known only by name.
func (r *Recorder) NodeByName(ctx context.Context, client kubernetes.Interface, name string, warning bool, reason contract.EventReason, format string, args ...any) error {
	n, err := client.CoreV1().Nodes().Get(ctx, name, metaGetOptions)
	if err != nil {
		return fmt.Errorf("get node %s for a %s event: %w", name, reason, err)
	}
	r.Node(n, warning, reason, format, args...)
	return nil
}

// Shutdown writes the pending Events (within ShutdownGrace) and stops.
// Events that could not be written are logged (client-go's error handler)
// as they fail.
func (r *Recorder) Shutdown() {
	r.mu.Lock()
	r.closed = true
	r.cond.Broadcast()
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		r.workers.Wait()
		close(done)
	}()
	timer := r.clock.NewTimer(ShutdownGrace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C():
		r.cancel()
		<-done
	}
	r.cancel()
}

// write takes Events off the queue until it is closed and empty.
func (r *Recorder) write() {
	defer r.workers.Done()
	for {
		r.mu.Lock()
		for len(r.pending) == 0 && !r.closed {
			r.cond.Wait()
		}
		if len(r.pending) == 0 {
			r.mu.Unlock()
			return
		}
		ev := r.pending[0]
		r.pending[0] = nil
		r.pending = r.pending[1:]
		r.mu.Unlock()
		if err := r.record(ev); err != nil {
			utilruntime.HandleError(err)
		}
	}
}

// record correlates ev with what was written before and writes it: a new
// Event, or a count increase of an earlier one.
func (r *Recorder) record(ev *corev1.Event) error {
	res, err := r.correlator.EventCorrelate(ev)
	if err != nil {
		return fmt.Errorf("correlate event %s on %s: %w", ev.Reason, ev.InvolvedObject.Name, err)
	}
	if res.Skip {
		return nil // the spam filter: a burst of one object's events
	}
	delay := eventRetryDelay
	for try := 1; ; try++ {
		var out *corev1.Event
		if res.Event.Count > 1 {
			out, err = r.sink.Patch(res.Event, res.Patch)
		}
		if res.Event.Count <= 1 || apierrors.IsNotFound(err) {
			res.Event.ResourceVersion = ""
			out, err = r.sink.Create(res.Event)
		}
		if err == nil {
			r.correlator.UpdateState(out)
			return nil
		}
		var status apierrors.APIStatus
		if errors.As(err, &status) || try >= eventTries {
			// Rejected by the API server (the same request would be
			// rejected again), or out of tries.
			return fmt.Errorf("write event %s on %s %s: %w", ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, err)
		}
		select {
		case <-r.ctx.Done():
			return fmt.Errorf("write event %s on %s %s: gave up at shutdown: %w", ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, err)
		case <-time.After(delay):
		}
		delay *= 2
	}
}
