package kube

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/contract"
)

var eventsResource = schema.GroupResource{Resource: "events"}

// heldSink stores Events like the API server (create, strategic merge
// patch, NotFound, AlreadyExists) and holds the first create about the
// node named held until either another request about that node arrives —
// a second writer on the object, which it records — or all others Events
// about other nodes have been created. Without a second writer on the
// held node the hold ends only when the others are written, so the other
// writers had every chance to take the held node's repeats.
type heldSink struct {
	held   string
	others int

	mu        sync.Mutex
	events    map[string]*corev1.Event
	rv        int
	inFlight  map[string]int // requests per involved object
	overlaps  []string
	created   int // Events about other nodes
	release   chan struct{}
	released  bool
	heldTaken bool
}

func newHeldSink(held string, others int) *heldSink {
	return &heldSink{held: held, others: others, events: map[string]*corev1.Event{}, inFlight: map[string]int{}, release: make(chan struct{})}
}

func (s *heldSink) releaseLocked() {
	if !s.released {
		s.released = true
		close(s.release)
	}
}

// enter marks a request about ev's object in flight; the first create
// about the held node waits for its release.
func (s *heldSink) enter(ev *corev1.Event, create bool) {
	obj := ev.InvolvedObject.Name
	s.mu.Lock()
	if s.inFlight[obj] > 0 {
		verb := "patch"
		if create {
			verb = "create"
		}
		s.overlaps = append(s.overlaps, fmt.Sprintf("%s of %s's event (count %d) while another request about %[2]s was in flight", verb, obj, ev.Count))
		if obj == s.held {
			s.releaseLocked()
		}
	}
	s.inFlight[obj]++
	hold := create && obj == s.held && !s.heldTaken
	if hold {
		s.heldTaken = true
	}
	s.mu.Unlock()
	if hold {
		<-s.release
	}
}

func (s *heldSink) leave(ev *corev1.Event, create bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight[ev.InvolvedObject.Name]--
	if create && err == nil && ev.InvolvedObject.Name != s.held {
		s.created++
		if s.created == s.others {
			s.releaseLocked()
		}
	}
}

func (s *heldSink) Create(ev *corev1.Event) (out *corev1.Event, err error) {
	s.enter(ev, true)
	defer func() { s.leave(ev, true, err) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.events[ev.Name]; ok {
		return nil, apierrors.NewAlreadyExists(eventsResource, ev.Name)
	}
	s.rv++
	stored := ev.DeepCopy()
	stored.ResourceVersion = strconv.Itoa(s.rv)
	s.events[ev.Name] = stored
	return stored.DeepCopy(), nil
}

func (s *heldSink) Patch(ev *corev1.Event, patch []byte) (out *corev1.Event, err error) {
	s.enter(ev, false)
	defer func() { s.leave(ev, false, err) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.events[ev.Name]
	if !ok {
		return nil, apierrors.NewNotFound(eventsResource, ev.Name)
	}
	oldJSON, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	newJSON, err := strategicpatch.StrategicMergePatch(oldJSON, patch, &corev1.Event{})
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	patched := &corev1.Event{}
	if err := json.Unmarshal(newJSON, patched); err != nil {
		return nil, err
	}
	s.rv++
	patched.ResourceVersion = strconv.Itoa(s.rv)
	s.events[ev.Name] = patched
	return patched.DeepCopy(), nil
}

func (s *heldSink) Update(*corev1.Event) (*corev1.Event, error) {
	return nil, apierrors.NewMethodNotSupported(eventsResource, "update")
}

// A repeat recorded while the first copy is still being created must wait
// for it: client-go's correlator turns it into a patch of the first copy's
// count, which only works once that copy exists and the correlator has
// seen the server's answer. With writers taking the queue in order, the
// repeats were sent while the first create was held: their patches found
// nothing and their creates collided with it, and the count was lost.
func TestRecorderWritesOneObjectAtATime(t *testing.T) {
	const repeats, others = 3, 200
	sink := newHeldSink("held", others)
	rec := newRecorder(sink, "events-unit-test", clock.RealClock{})
	held := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "held", UID: "uid-held"}}
	for range repeats {
		rec.Node(held, false, contract.EventRebootPending, "waiting for approval")
	}
	for i := range others {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("other-%03d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
		rec.Node(n, false, contract.EventNPUDriverUpgrade, "step of node %d", i)
	}
	rec.Shutdown()

	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, o := range sink.overlaps {
		t.Error(o)
	}
	var heldEvents []*corev1.Event
	for _, e := range sink.events {
		switch e.InvolvedObject.Name {
		case "held":
			heldEvents = append(heldEvents, e)
		default:
			if e.Count != 1 {
				t.Errorf("event on %s has count %d, want 1", e.InvolvedObject.Name, e.Count)
			}
		}
	}
	if got := len(sink.events) - len(heldEvents); got != others {
		t.Errorf("%d events on the other nodes, want %d", got, others)
	}
	if len(heldEvents) != 1 || heldEvents[0].Count != repeats {
		counts := []int32{}
		for _, e := range heldEvents {
			counts = append(counts, e.Count)
		}
		t.Fatalf("repeated event written as %d objects with counts %v, want one with count %d", len(heldEvents), counts, repeats)
	}
}
