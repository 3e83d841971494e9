// After the reboot: what the node must show before it is validated, and the
// pods started before the new driver that must be re-rolled.

package rollout

import (
	"fmt"
	"strings"
	"time"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

func decideValidation(b builder, n NodeView, p Policy, s Snapshot, now time.Time) ([]Action, string, time.Duration) {
	wait := validationGap(n)
	var acts []Action
	if wait == "" {
		var del []TargetPod
		del, wait = rerollNeeds(n, s.Targets)
		if len(del) > 0 {
			uids := map[string]string{}
			for u, t := range n.Rerolled {
				uids[u] = t
			}
			for _, pd := range del {
				uids[pd.UID] = pd.Target
			}
			acts = append(acts, Action{Kind: ActDeletePods, Node: n.Name, ResourceVersion: n.ResourceVersion,
				From: n.State, To: n.State, Pods: del, Message: fmt.Sprintf("re-rolling %d pods started before the driver was ready", len(del)),
				Change: kube.NodeChange{Annotations: map[string]*string{b.k.UpgradeRerolled(): kube.Set(FormatRerolled(uids))}}})
			return acts, wait, 0
		}
	}
	if wait == "" {
		return []Action{b.transition(n, contract.StateUncordonRequired, "validated: driver "+n.Loaded+" ready, re-roll targets started after it")}, "", 0
	}
	elapsed := now.Sub(stateSeen(n, now))
	if p.RebootTimeout > 0 && elapsed >= p.RebootTimeout {
		return []Action{b.fail(n, StepValidation, fmt.Sprintf("not valid after %s: %s", p.RebootTimeout, wait))}, "", 0
	}
	if p.RebootTimeout > 0 {
		return nil, wait, p.RebootTimeout - elapsed
	}
	return nil, wait, 0
}

// validationGap names the first validation check that fails, "" if the
// driver side is valid.
func validationGap(n NodeView) string {
	switch {
	case n.Loaded != n.Desired:
		return fmt.Sprintf("driver %s loaded, want %s", orNone(n.Loaded), n.Desired)
	case n.Driver == nil:
		return "no driver pod on the node"
	case n.Driver.Version != n.Desired:
		return fmt.Sprintf("driver pod %s is of version %s, want %s", n.Driver.Name, orNone(n.Driver.Version), n.Desired)
	case !n.Driver.Ready:
		return "driver pod " + n.Driver.Name + " not Ready"
	case !n.DriverReady:
		return "health-watch has not reported driver-ready=true"
	}
	return ""
}

// rerollNeeds returns the target pods to delete and what is still awaited.
func rerollNeeds(n NodeView, targets []string) ([]TargetPod, string) {
	var del []TargetPod
	var waits []string
	for _, t := range targets {
		pods := n.TargetPods[t]
		fresh, rerolled := false, false
		for _, target := range n.Rerolled {
			rerolled = rerolled || target == t
		}
		for _, pd := range pods {
			_, gone := n.Rerolled[pd.UID]
			switch {
			case gone && !pd.Terminating:
				// Deleted by us but still there (crash before delete, or
				// the delete is in flight): delete again.
				del = append(del, pd)
			case gone || pd.Terminating:
			case startedBefore(pd, n.Driver):
				del = append(del, pd)
			case pd.Ready:
				fresh = true
			}
		}
		if !fresh && (len(pods) > 0 || rerolled) {
			waits = append(waits, "waiting for a new "+t+" pod")
		}
	}
	if len(del) > 0 {
		return del, "re-rolling"
	}
	return nil, strings.Join(waits, "; ")
}

// startedBefore: API times have second precision, so a pod started in
// the same second as the driver became ready counts as after it; a pod
// not started yet will start after.
func startedBefore(pd TargetPod, drv *DriverPod) bool {
	return drv != nil && !drv.ReadyAt.IsZero() && !pd.Started.IsZero() && pd.Started.Before(drv.ReadyAt.Truncate(time.Second))
}
