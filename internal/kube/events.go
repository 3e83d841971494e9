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
	// rollout's first decision (an Event per node) by round trips. Two
	// writers never hold Events about the same object; see Recorder.
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
//
// The broadcaster correlates and writes every Event on one goroutine
// (StartEventWatcher → recordToSink → recordEvent), so a repeat is only
// correlated once the first copy's create has returned and UpdateState
// has recorded it. The correlator depends on that order: a repeat becomes
// a patch that sets an absolute count on the first copy's name. With
// several writers taking Events off one queue, a repeat could be sent
// before the first copy existed: its patch found nothing, its fallback
// create and the first copy's create collided (AlreadyExists, the loser
// dropped), patches of counts 2 and 3 could land in either order, and a
// late UpdateState could set the correlator back to an older count — each
// loses repeats. Falling back from AlreadyExists to a re-read and a patch
// would mend only the collision, not the reordered absolute counts. So
// the queue is kept per involved object, and an object's Events are
// correlated and written by one writer at a time, in the order recorded:
// every correlation key (the correlator's count, its aggregation and its
// spam filter) includes the involved object and the source, which is
// fixed per Recorder, so for each key this is the broadcaster's order,
// while different objects are still written in parallel.
type Recorder struct {
	sink       record.EventSink
	source     corev1.EventSource
	clock      clock.Clock
	correlator *record.EventCorrelator
	ctx        context.Context
	cancel     context.CancelFunc
	workers    sync.WaitGroup

	mu   sync.Mutex
	cond *sync.Cond
	// objects holds, per involved object, the Events not yet taken by a
	// writer; an object is listed from its first pending Event until a
	// writer finds its queue empty after a write.
	objects map[corev1.ObjectReference]*objectEvents
	// ready are the objects with pending Events that no writer holds, in
	// the order they became ready.
	ready  []*objectEvents
	closed bool
}

// objectEvents are the pending Events about one object, oldest first.
type objectEvents struct {
	ref    corev1.ObjectReference
	events []*corev1.Event
}

// NewRecorder starts writing Events as component (the event's source).
// Call Shutdown before the process exits.
func NewRecorder(client kubernetes.Interface, component string) *Recorder {
	return newRecorder(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")}, component, clock.RealClock{})
}

func newRecorder(sink record.EventSink, component string, c clock.Clock) *Recorder {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{
		sink:       sink,
		source:     corev1.EventSource{Component: component},
		clock:      c,
		correlator: record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{Clock: c}),
		ctx:        ctx, cancel: cancel,
		objects: map[corev1.ObjectReference]*objectEvents{},
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
	q := r.objects[ev.InvolvedObject]
	if q == nil {
		// Neither pending nor held by a writer: ready for any writer.
		q = &objectEvents{ref: ev.InvolvedObject}
		r.objects[q.ref] = q
		r.ready = append(r.ready, q)
		r.cond.Signal()
	}
	q.events = append(q.events, ev)
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

// write takes Events off the queue until it is closed and empty. It holds
// the object it took until that Event is written, so the object's next
// Event is correlated against the server's answer to this one.
func (r *Recorder) write() {
	defer r.workers.Done()
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		for len(r.ready) == 0 && !r.closed {
			r.cond.Wait()
		}
		if len(r.ready) == 0 {
			// Closed, and every object left is held by a writer, which
			// writes the rest of that object's Events.
			return
		}
		q := r.ready[0]
		r.ready[0] = nil
		r.ready = r.ready[1:]
		ev := q.events[0]
		q.events[0] = nil
		q.events = q.events[1:]
		r.mu.Unlock()
		if err := r.record(ev); err != nil {
			utilruntime.HandleError(err)
		}
		r.mu.Lock()
		if len(q.events) == 0 {
			delete(r.objects, q.ref)
		} else {
			// Behind the other ready objects, so that one object's burst
			// does not hold a writer while others wait.
			r.ready = append(r.ready, q)
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
