package rollout

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// Seen is when this rollout process first saw a node in its current step,
// on its own clock. The times written on the Node (driver-upgrade.since by
// a rollout run that may have run on another machine, reboot-started-at by
// the NPU node's rebooter) come from other clocks: a timeout computed from
// them fires early or never when the clocks disagree. Timeouts are
// measured from Seen instead; the written times are only shown to humans.
//
// Each entry carries what it was seen for, so a node that has moved on
// since (a chained transition, a new reboot) gets no stale time.
type Seen struct {
	// State and Since are the node's upgrade state and since annotation
	// as first seen at StateAt.
	State   string
	Since   string
	StateAt time.Time
	// RebootFrom is the boot ID the rebooter recorded when it started
	// the reboot (reboot-from-boot-id), first seen at RebootAt.
	RebootFrom string
	RebootAt   time.Time
}

// observer remembers, per node, when this process first saw it in its
// current step. It lives as long as the process: a restarted rollout
// measures every timeout again from when it first sees the node, so it may
// wait longer than the timeout after a restart, never shorter. The zero
// value is ready to use.
type observer struct {
	mu   sync.Mutex
	seen map[string]Seen
	// returned is the last node seen come back from its upgrade (from a
	// state in progress to none); since is when Run began observing.
	returned Return
	since    time.Time
}

// begin marks the start of a rollout run (Snapshot.ObservedSince).
func (o *observer) begin(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		o.since = now
	}
}

// settled is the last return seen and when observing began.
func (o *observer) settled() (Return, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.returned, o.since
}

// observe updates the observations from nodes at now (the observer's
// clock) and returns them for the snapshot. Nodes gone from the list are
// forgotten.
func (o *observer) observe(nodes []*corev1.Node, k contract.Keys, now time.Time) map[string]Seen {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]Seen, len(nodes))
	for _, n := range nodes {
		prev := o.seen[n.Name]
		cur := Seen{State: n.Labels[k.UpgradeState()], Since: n.Annotations[k.UpgradeSince()], RebootFrom: n.Annotations[k.RebootFromBootID()]}
		if was, _ := contract.ParseUpgradeState(prev.State); was.InProgress() && cur.State == "" && !prev.StateAt.IsZero() {
			o.returned = Return{Node: n.Name, At: now}
		}
		cur.StateAt, cur.RebootAt = now, now
		if prev.State == cur.State && prev.Since == cur.Since && !prev.StateAt.IsZero() {
			cur.StateAt = prev.StateAt
		}
		if prev.RebootFrom == cur.RebootFrom && !prev.RebootAt.IsZero() {
			cur.RebootAt = prev.RebootAt
		}
		out[n.Name] = cur
	}
	// Each call builds a new map and never changes it after, so the
	// snapshot may keep it.
	o.seen = out
	return out
}

// stateSeen is when the node was first seen in its current state: the
// observation if it is of this state, else now (a node viewed in a state
// no decision has observed yet, as within a chain of transitions).
func stateSeen(n NodeView, now time.Time) time.Time {
	if n.StateSeen.IsZero() || n.StateSeen.After(now) {
		return now
	}
	return n.StateSeen
}

// rebootSeen is when the node's current reboot was first seen started.
func rebootSeen(n NodeView, now time.Time) time.Time {
	if n.RebootSeen.IsZero() || n.RebootSeen.After(now) {
		return now
	}
	return n.RebootSeen
}
