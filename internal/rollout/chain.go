package rollout

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// maxChain bounds the transitions one node takes in one decision; the
// longest path the cluster can allow at once (none → … → reboot-required)
// has seven.
const maxChain = 10

// DecideChained is Decide with every node carried through all the
// transitions the cluster allows right now, so that one conditional patch
// and one NPUDriverUpgrade event cover what would otherwise take a write
// and a decision round per state: a node admitted with no pods to evict
// and no drain goes from upgrade-required to reboot-required in one write.
//
// Each further round decides on the nodes as the chained patches will
// leave them. Only nodes that moved in the first round keep moving, and a
// step that frees budget (a node leaving the in-flight or unavailable
// count) ends its node's chain without being shown to the later rounds:
// the patches are applied in parallel, each conditional on its own node
// only, so no admission may count on budget freed by another node's write
// that could still fail. Evictions and re-roll deletions end a chain too;
// the next decision, on the written node, asks for them.
func DecideChained(in Inputs, v View, p Policy, keys contract.Keys, now time.Time) (Snapshot, Decision) {
	w := newViewer(in, v)
	s := w.snapshot()
	first := Decide(s, p, keys, now)
	chains := map[string]*Action{}
	// open: the chain may take another step; freed: it took a step that
	// frees budget, so later rounds see the node as it was.
	open, freed := map[string]bool{}, map[string]bool{}
	for node, acts := range byNode(first.Actions) {
		if len(acts) == 1 && acts[0].Kind == ActTransition {
			a := acts[0]
			chains[node] = &a
			freed[node] = freesBudget(a)
			open[node] = !freed[node]
		}
	}
	index := make(map[string]int, len(s.Nodes))
	for i, n := range s.Nodes {
		index[n.Name] = i
	}
	objs := make(map[string]*corev1.Node, len(in.Nodes))
	for _, n := range in.Nodes {
		objs[n.Name] = n
	}
	// cur is the fleet as the chains so far leave it; only nodes that
	// moved in a round are viewed again.
	cur := s
	cur.Nodes = append([]NodeView(nil), s.Nodes...)
	moved := open
	for round := 1; round < maxChain && len(open) > 0; round++ {
		for node := range moved {
			if !freed[node] {
				cur.Nodes[index[node]] = w.view(chains[node].Change.ApplyTo(objs[node]))
			}
		}
		d := Decide(cur, p, keys, now)
		moved = map[string]bool{}
		for node, acts := range byNode(d.Actions) {
			c := chains[node]
			if !open[node] || len(acts) != 1 || acts[0].Kind != ActTransition || acts[0].From != c.To {
				continue
			}
			*c = c.then(acts[0])
			moved[node] = true
			freed[node] = freesBudget(acts[0])
		}
		for node := range open {
			if !moved[node] || freed[node] {
				delete(open, node)
			}
		}
	}
	// The first decision's order: a node's actions stay in order and the
	// logs read as before.
	out := make([]Action, 0, len(first.Actions))
	for _, a := range first.Actions {
		c, ok := chains[a.Node]
		switch {
		case !ok:
			out = append(out, a)
		case c != nil:
			out = append(out, *c)
			chains[a.Node] = nil
		}
	}
	first.Actions = out
	return s, first
}

// then merges the next transition of the same node into a.
func (a Action) then(next Action) Action {
	merged := a
	merged.Via = append(append(append([]contract.UpgradeState(nil), a.Via...), a.To), next.Via...)
	merged.To = next.To
	merged.Change = a.Change.Merge(next.Change)
	merged.Message = a.Message + "; " + next.Message
	merged.Events = append(append([]Event(nil), a.Events...), next.Events...)
	return merged
}

// freesBudget is true for a step after which the node no longer counts as
// in flight or unavailable.
func freesBudget(a Action) bool {
	return (a.From.InProgress() && !a.To.InProgress()) || (a.Change.Unschedulable != nil && !*a.Change.Unschedulable)
}

func byNode(acts []Action) map[string][]Action {
	m := map[string][]Action{}
	for _, a := range acts {
		m[a.Node] = append(m[a.Node], a)
	}
	return m
}
