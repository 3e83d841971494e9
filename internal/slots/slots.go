// Package slots bounds how many nodes reboot at once, cluster-wide, with
// coordination.k8s.io Leases: slot i is the Lease reboot-slot-<i> in one
// namespace, held by the node whose name is its holderIdentity.
//
// Taking a slot is a compare-and-swap on the API server (create, or update
// at the resourceVersion that showed the slot free), so two nodes never
// both win one slot, whatever their caches say. A holder that vanishes
// never blocks the fleet for good: its slot is free once its holder has
// not renewed it for the lease duration (the TTL).
//
// How long a holder has not renewed is measured on the observer's clock,
// as client-go's leader election does: the renew time a holder writes is
// by its own clock, which need not agree with the observer's by minutes.
// Each Slots remembers when it first saw each slot's current holder record
// (holder, acquire and renew time as written) and counts the TTL from
// there. A fresh process has seen nothing yet and gives every held slot a
// full TTL: it may wait longer than the TTL, never shorter.
package slots

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Label marks the slot Leases, so watchers and kubectl can select them:
// kubectl get leases -l app.kubernetes.io/component=reboot-slot.
const (
	LabelKey   = "app.kubernetes.io/component"
	LabelValue = "reboot-slot"
)

// Selector selects the slot Leases.
func Selector() labels.Selector { return labels.SelectorFromSet(labels.Set{LabelKey: LabelValue}) }

// Name is the Lease of slot i.
func Name(i int) string { return fmt.Sprintf("reboot-slot-%d", i) }

// Config describes the slots one holder competes for.
type Config struct {
	Client    kubernetes.Interface
	Namespace string
	// Count is the number of slots (nodes rebooting at once).
	Count int
	// TTL is the lease duration: a slot not renewed for this long is free.
	TTL time.Duration
	// Holder is this node's name.
	Holder string
	Clock  clock.PassiveClock
}

// Slots is one holder's view of the slots.
type Slots struct {
	cfg Config

	mu sync.Mutex
	// seen maps a slot to its holder record as last seen and when this
	// process first saw that record, on its own clock.
	seen map[string]sighting
}

// sighting is one holder record of a slot and when it was first seen.
type sighting struct {
	record string
	at     time.Time
}

// New validates cfg.
func New(cfg Config) (*Slots, error) {
	if cfg.Count < 1 {
		return nil, fmt.Errorf("reboot slots: count %d, want at least 1 (--slots)", cfg.Count)
	}
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("reboot slots: TTL %s, want at least 1s (--slot-ttl)", cfg.TTL)
	}
	if cfg.Holder == "" || cfg.Namespace == "" {
		return nil, errors.New("reboot slots: holder and namespace must be set (--node-name, --namespace)")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Slots{cfg: cfg, seen: map[string]sighting{}}, nil
}

// Free reports whether l, by the times written in it, can be taken at now:
// nobody holds it, or its renew time is more than its duration before now.
// The renew time is by the holder's clock: good for showing, and for an
// observer on the same clock (tests); holders decide with their own
// observations instead.
func Free(l *coordinationv1.Lease, now time.Time) bool {
	return ptr.Deref(l.Spec.HolderIdentity, "") == "" || !now.Before(Expiry(l))
}

// Expiry is when l frees itself if not renewed, by its holder's clock.
func Expiry(l *coordinationv1.Lease) time.Time {
	var renewed time.Time
	switch {
	case l.Spec.RenewTime != nil:
		renewed = l.Spec.RenewTime.Time
	case l.Spec.AcquireTime != nil:
		renewed = l.Spec.AcquireTime.Time
	}
	return renewed.Add(time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second)
}

// record is what a holder writes when it takes or renews l: any change
// shows the holder alive (or a new one).
func record(l *coordinationv1.Lease) string {
	stamp := func(t *metav1.MicroTime) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s|%s|%s|%d", ptr.Deref(l.Spec.HolderIdentity, ""), stamp(l.Spec.AcquireTime), stamp(l.Spec.RenewTime),
		ptr.Deref(l.Spec.LeaseDurationSeconds, 0))
}

// observedExpiry is when l frees itself unless renewed, on this process's
// clock: its duration after this process first saw its current holder
// record. The caller holds s.mu.
func (s *Slots) observedExpiry(l *coordinationv1.Lease, now time.Time) time.Time {
	rec := record(l)
	sg, ok := s.seen[l.Name]
	if !ok || sg.record != rec {
		sg = sighting{record: rec, at: now}
		s.seen[l.Name] = sg
	}
	return sg.at.Add(time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second)
}

// free: nobody holds l, or this process has seen no renewal of it for its
// duration. The caller holds s.mu.
func (s *Slots) free(l *coordinationv1.Lease, now time.Time) bool {
	if ptr.Deref(l.Spec.HolderIdentity, "") == "" {
		return true
	}
	return !now.Before(s.observedExpiry(l, now))
}

// wrote records l as this holder just wrote it: its own write is seen now.
func (s *Slots) wrote(l *coordinationv1.Lease, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[l.Name] = sighting{record: record(l), at: now}
}

// HeldBy returns the live slot among leases held by holder, or nil.
func (s *Slots) HeldBy(leases []*coordinationv1.Lease) *coordinationv1.Lease {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var held *coordinationv1.Lease
	for _, l := range leases {
		if !s.isSlot(l.Name) {
			continue
		}
		// Every slot is looked at, so that a renewal is seen when the
		// cache shows it, not only when this holder next competes.
		free := s.free(l, now)
		if held == nil && ptr.Deref(l.Spec.HolderIdentity, "") == s.cfg.Holder && !free {
			held = l
		}
	}
	return held
}

// Held reports whether this holder has a live slot in leases (a cached
// view: good for deciding, not for acting; Acquire re-reads).
func (s *Slots) Held(leases []*coordinationv1.Lease) bool { return s.HeldBy(leases) != nil }

func (s *Slots) isSlot(name string) bool {
	for i := 0; i < s.cfg.Count; i++ {
		if name == Name(i) {
			return true
		}
	}
	return false
}

// Result of Acquire.
type Result struct {
	// Slot is the Lease now held, "" when every slot is taken.
	Slot string
	// NextExpiry is, when every slot is taken, the earliest time (on
	// this process's clock) one of them frees itself unless renewed.
	NextExpiry time.Time
	// Holders are the nodes holding the slots, for the "waiting for" message.
	Holders []string
}

// Acquire takes a free slot, or renews the one this holder has. It reads
// the slots from the API server, not a cache, so a holder never takes a
// second slot because its cache had not seen the first.
func (s *Slots) Acquire(ctx context.Context) (Result, error) {
	leases, err := s.list(ctx)
	if err != nil {
		return Result{}, err
	}
	now := s.cfg.Clock.Now()
	if l := s.HeldBy(valuesOf(leases)); l != nil {
		if err := s.renew(ctx, l, now); err != nil {
			return Result{}, err
		}
		return Result{Slot: l.Name}, nil
	}
	var res Result
	// Start at a holder-specific slot so that a fleet waking up at once
	// does not all race for slot 0.
	start := int(hashOf(s.cfg.Holder) % uint32(s.cfg.Count))
	for k := 0; k < s.cfg.Count; k++ {
		name := Name((start + k) % s.cfg.Count)
		l, ok := leases[name]
		s.mu.Lock()
		free, exp := ok && s.free(l, now), time.Time{}
		if ok && !free {
			exp = s.observedExpiry(l, now)
		}
		s.mu.Unlock()
		switch {
		case !ok:
			err = s.create(ctx, name, now)
		case free:
			err = s.take(ctx, l, now)
		default:
			if res.NextExpiry.IsZero() || exp.Before(res.NextExpiry) {
				res.NextExpiry = exp
			}
			res.Holders = append(res.Holders, ptr.Deref(l.Spec.HolderIdentity, ""))
			continue
		}
		switch {
		case err == nil:
			return Result{Slot: name}, nil
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			// Another node won this slot between our read and our write.
			continue
		default:
			return Result{}, err
		}
	}
	return res, nil
}

// Release frees every slot this holder has; releasing nothing is fine.
func (s *Slots) Release(ctx context.Context) error {
	leases, err := s.list(ctx)
	if err != nil {
		return err
	}
	for _, l := range leases {
		if ptr.Deref(l.Spec.HolderIdentity, "") != s.cfg.Holder {
			continue
		}
		l = l.DeepCopy()
		l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.AcquireTime = nil, nil, nil
		_, err := s.cfg.Client.CoordinationV1().Leases(s.cfg.Namespace).Update(ctx, l, metav1.UpdateOptions{})
		// A conflict means someone took the slot after it expired: it is
		// not ours to release any more.
		if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("release reboot slot %s/%s held by node %s: %w", s.cfg.Namespace, l.Name, s.cfg.Holder, err)
		}
	}
	return nil
}

func (s *Slots) list(ctx context.Context) (map[string]*coordinationv1.Lease, error) {
	list, err := s.cfg.Client.CoordinationV1().Leases(s.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: Selector().String()})
	if err != nil {
		return nil, fmt.Errorf("list reboot slots in namespace %s (the rebooter needs list on leases there): %w", s.cfg.Namespace, err)
	}
	out := make(map[string]*coordinationv1.Lease, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

func (s *Slots) create(ctx context.Context, name string, now time.Time) error {
	t := metav1.NewMicroTime(now)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.cfg.Namespace, Labels: map[string]string{LabelKey: LabelValue}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(s.cfg.Holder),
			LeaseDurationSeconds: ptr.To(s.ttlSeconds()),
			AcquireTime:          &t,
			RenewTime:            &t,
		},
	}
	created, err := s.cfg.Client.CoordinationV1().Leases(s.cfg.Namespace).Create(ctx, l, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create reboot slot %s/%s for node %s: %w", s.cfg.Namespace, name, s.cfg.Holder, err)
	}
	s.wrote(created, now)
	return nil
}

// take updates a free slot at the resourceVersion that showed it free.
func (s *Slots) take(ctx context.Context, l *coordinationv1.Lease, now time.Time) error {
	t := metav1.NewMicroTime(now)
	l = l.DeepCopy()
	if prev := ptr.Deref(l.Spec.HolderIdentity, ""); prev != "" && prev != s.cfg.Holder {
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	}
	l.Spec.HolderIdentity = ptr.To(s.cfg.Holder)
	l.Spec.LeaseDurationSeconds = ptr.To(s.ttlSeconds())
	l.Spec.AcquireTime, l.Spec.RenewTime = &t, &t
	taken, err := s.cfg.Client.CoordinationV1().Leases(s.cfg.Namespace).Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("take reboot slot %s/%s for node %s: %w", s.cfg.Namespace, l.Name, s.cfg.Holder, err)
	}
	s.wrote(taken, now)
	return nil
}

func (s *Slots) renew(ctx context.Context, l *coordinationv1.Lease, now time.Time) error {
	t := metav1.NewMicroTime(now)
	l = l.DeepCopy()
	l.Spec.RenewTime = &t
	l.Spec.LeaseDurationSeconds = ptr.To(s.ttlSeconds())
	renewed, err := s.cfg.Client.CoordinationV1().Leases(s.cfg.Namespace).Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("renew reboot slot %s/%s of node %s: %w", s.cfg.Namespace, l.Name, s.cfg.Holder, err)
	}
	s.wrote(renewed, now)
	return nil
}

func (s *Slots) ttlSeconds() int32 { return int32(max(s.cfg.TTL/time.Second, 1)) }

func valuesOf(m map[string]*coordinationv1.Lease) []*coordinationv1.Lease {
	out := make([]*coordinationv1.Lease, 0, len(m))
	for _, l := range m {
		out = append(out, l)
	}
	return out
}

func hashOf(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}
