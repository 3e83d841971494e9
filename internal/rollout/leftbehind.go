package rollout

import (
	"fmt"
	"strings"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// LeftBehind is a node the rollout cannot move for a reason of its own
// (NotReady, a recovery reboot pending, the skip label, no canary able to
// pass): the rollout finishes without it, reports it, and the next run
// (resume CronJob, next helm upgrade) takes it up once the reason is gone.
// A node in flight is never left behind: the rollout cordoned it and sees
// it through.
type LeftBehind struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
	// OutOfDate: the node still runs a driver other than its desired one.
	OutOfDate bool `json:"outOfDate"`
	// Skipped: the admin's skip label keeps the rollout off the node.
	Skipped bool `json:"skipped,omitempty"`
}

// FailsRollout says whether the nodes left behind make a finished rollout
// fail under mode.
func FailsRollout(mode contract.LeftBehindMode, left []LeftBehind) bool {
	for _, l := range left {
		switch mode {
		case contract.LeftBehindFail:
			return true
		case contract.LeftBehindAlwaysSucceed:
			return false
		default:
			if l.OutOfDate && !l.Skipped {
				return true
			}
		}
	}
	return false
}

// leftSet collects, during one decision, the nodes left behind and why.
type leftSet map[string]string

// ownReason says why n cannot be moved for a reason of its own, "" if it
// can. Only for nodes not in flight.
func ownReason(n NodeView, k contract.Keys) string {
	switch {
	case n.Skip:
		return "skip label set (to include it: kubectl label node " + n.Name + " " + k.UpgradeSkip() + "-)"
	case !n.Ready:
		return "node NotReady (taken up by the next rollout run once it is Ready)"
	case recoveryPending(n):
		return "a recovery reboot is pending (reboot-reason=recovery; its RebootPending events say what it waits for; " +
			"with recoveryPolicy.autoRecover false it waits for: kubectl annotate node " + n.Name + " " + k.ApproveReboot() + "=true)"
	}
	return ""
}

// outcome is the rollout's state once nothing is in flight and nothing
// acts: queued nodes all left behind count as done for it.
func outcome(s Snapshot, p Policy, k contract.Keys, queued []*NodeView, failed int, g canaryGate, left leftSet) Outcome {
	if len(queued) > 0 {
		if p.Paused {
			return Paused
		}
		if p.MaxFailures > 0 && failed >= p.MaxFailures {
			return Stuck
		}
		if len(g.failed) > 0 {
			// A failed canary holds the rest: an admin must act.
			return Stuck
		}
		for _, n := range queued {
			if _, ok := left[n.Name]; !ok {
				return Running // held by a budget that frees up
			}
		}
	}
	uncovered := false
	for _, n := range s.Nodes {
		if n.ProfileError != "" {
			uncovered = true
			continue
		}
		if n.State == contract.StateDone && !n.Skip && !n.UpToDate() {
			if why := ownReason(n, k); why != "" {
				left[n.Name] = why
				continue
			}
			return Running // driver version not reported yet: wait
		}
	}
	if failed > 0 || uncovered {
		return Stuck
	}
	return Finished
}

// stragglers re-rolls, fleet-wide, target pods older than their node's
// driver readiness (e.g. a node rebooted outside the rollout). A node
// whose driver pod is not Ready for a reason of its own (a pending
// recovery, NotReady) is left behind rather than waited for.
func stragglers(s Snapshot, k contract.Keys, d *Decision, left leftSet) []Action {
	var acts []Action
	for _, n := range s.Nodes {
		if _, gone := left[n.Name]; gone || n.Skip && n.OutOfDate() {
			continue
		}
		if n.Driver == nil || !n.Driver.Ready {
			if why := ownReason(n, k); why != "" {
				left[n.Name] = why + "; its driver pod is not Ready"
				d.Waiting[n.Name] = left[n.Name]
				continue
			}
			// Finished means the stack works on every node, also right
			// after an install, where no node went through validation.
			d.Waiting[n.Name] = "driver pod not Ready yet"
			d.Waiting["*reroll"] = "waiting for driver pods"
			continue
		}
		var del []TargetPod
		var unready []string
		for _, t := range s.Targets {
			ready := false
			for _, pd := range n.TargetPods[t] {
				switch {
				case pd.Terminating:
				case startedBefore(pd, n.Driver):
					del = append(del, pd)
				case pd.Ready:
					ready = true
				}
			}
			if !ready && len(n.TargetPods[t]) > 0 {
				unready = append(unready, t)
			}
		}
		switch {
		case len(del) > 0:
			acts = append(acts, Action{Kind: ActDeletePods, Node: n.Name, Pods: del,
				Message: fmt.Sprintf("fleet check: re-rolling %d pods started before the driver was ready", len(del))})
			d.Waiting[n.Name] = "re-rolling straggler pods"
		case len(unready) > 0:
			// The stack works on a node once its device plugin serves, not
			// when the driver is up: a pod still in its driver gate or
			// crash-looping holds the finish, and the deadline names it.
			d.Waiting[n.Name] = "waiting for a Ready pod of " + strings.Join(unready, ", ") +
				" (kubectl -n <namespace> describe pod on this node for why it is not Ready)"
			d.Waiting["*reroll"] = "waiting for re-roll target pods to be Ready"
		}
	}
	return acts
}

// listLeftBehind turns left into the decision's report, adding the skipped
// out-of-date nodes; sorted by name.
func listLeftBehind(s Snapshot, left leftSet, k contract.Keys) []LeftBehind {
	var out []LeftBehind
	for _, n := range s.Nodes {
		why, ok := left[n.Name]
		skipped := n.Skip && n.OutOfDate() && !n.State.InProgress() && n.State != contract.StateFailed
		if !ok && skipped {
			why, ok = ownReason(n, k), true
		}
		if ok {
			out = append(out, LeftBehind{Node: n.Name, Reason: why, OutOfDate: n.OutOfDate() || n.Loaded == "", Skipped: n.Skip})
		}
	}
	return out
}

// FormatLeftBehind is the one-line report of the nodes left behind.
func FormatLeftBehind(left []LeftBehind) string {
	parts := make([]string, 0, len(left))
	for _, l := range left {
		parts = append(parts, l.Node+": "+l.Reason)
	}
	return strings.Join(parts, "; ")
}
