package rolloutrecord

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// Changes are the entries a node's update from old to cur makes, seen at
// now: a state change, an approval given, a reboot started, a new boot.
func Changes(k contract.Keys, old, cur *corev1.Node, now time.Time) []Entry {
	var out []Entry
	add := func(kind Kind, from, to string) {
		out = append(out, Entry{At: now, Kind: kind, Node: cur.Name, From: from, To: to})
	}
	if from, to := old.Labels[k.UpgradeState()], cur.Labels[k.UpgradeState()]; from != to {
		add(KindState, from, to)
	}
	if old.Annotations[k.ApproveReboot()] != contract.True && cur.Annotations[k.ApproveReboot()] == contract.True {
		add(KindApproved, "", "")
	}
	if old.Annotations[k.RebootFromBootID()] == "" && cur.Annotations[k.RebootFromBootID()] != "" {
		reason := cur.Annotations[k.RebootStartedReason()]
		if reason == "" {
			reason = cur.Annotations[k.RebootReason()]
		}
		add(KindRebooting, "", reason)
	}
	if b := old.Status.NodeInfo.BootID; b != "" && cur.Status.NodeInfo.BootID != "" && b != cur.Status.NodeInfo.BootID {
		add(KindBooted, "", "")
	}
	return out
}

// CatchUp is the entry a node seen anew (a rollout run starting on a
// record an earlier run left) makes when its state is not the one the
// record last has for it: what changed while no rollout watched. A node
// the record does not name yet makes an entry only if it has a state.
func CatchUp(k contract.Keys, r Record, n *corev1.Node, now time.Time) []Entry {
	state := n.Labels[k.UpgradeState()]
	last, known := r.LastState(n.Name)
	if last == state || !known && state == "" {
		return nil
	}
	return []Entry{{At: now, Kind: KindState, Node: n.Name, From: last, To: state}}
}
