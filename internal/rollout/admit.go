package rollout

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// canaryGate is where the canaries stand; the other nodes start only once
// a canary passed and none is still to go.
type canaryGate struct {
	any bool
	// pending: a canary is in flight or can still be started.
	pending bool
	passed  bool
	failed  []string
	// stuck names the canaries that cannot move, with why.
	stuck []string
}

func gateCanaries(nodes []NodeView, k contract.Keys) canaryGate {
	var g canaryGate
	for _, n := range nodes {
		if !n.Canary {
			continue
		}
		g.any = true
		switch {
		case n.State == contract.StateFailed:
			g.failed = append(g.failed, n.Name)
		case n.State.InProgress():
			g.pending = true
		case n.ProfileError != "":
			g.stuck = append(g.stuck, n.Name+": "+n.ProfileError)
		case n.State == contract.StateDone && n.UpToDate():
			g.passed = true
		case ownReason(n, k) != "":
			g.stuck = append(g.stuck, n.Name+": "+ownReason(n, k))
		default:
			g.pending = true
		}
	}
	return g
}

// holds returns why the canaries hold a non-canary node, "" if they do not;
// left is true when no canary can pass in this run, so the node is left
// behind rather than waiting.
func (g canaryGate) holds(k contract.Keys) (why string, left bool) {
	switch {
	case !g.any:
		return "", false
	case len(g.failed) > 0:
		return "waiting for the canary nodes: " + strings.Join(g.failed, ", ") + " failed; fix the cause, then retry with: kubectl label node " +
			g.failed[0] + " " + k.UpgradeState() + "=" + string(contract.StateUpgradeRequired) + " --overwrite", false
	case g.pending:
		return "waiting for the canary nodes to finish", false
	case !g.passed:
		return "no canary can be upgraded (" + strings.Join(g.stuck, "; ") + ") and the other nodes start only after a canary passed: " +
			"make a canary upgradable, or select other canaries with driver.upgradePolicy.canarySelector", true
	}
	return "", false
}

// admitBudget is what admission counts against.
type admitBudget struct {
	inFlight, unavailable, budget, failed int
}

// admitted is what admit did.
type admitted struct {
	admitted int
	// windowWaiting are the queued nodes waiting for the window; settling
	// is true when the settling delay held one back.
	windowWaiting []string
	settling      bool
}

// admit moves queued nodes to cordon-required within the budgets, canaries
// first, then by name. Queued nodes that cannot move for a reason of their
// own, or held by canaries none of which can pass, go to left. Outside
// the maintenance window only approved nodes are admitted; the nodes the
// budgets would admit but for the window get a MaintenanceWindowClosed
// event (d.Announce), the others just wait. settle, when not "", is why
// the settling delay holds admissions back.
func admit(b builder, cands []*NodeView, p Policy, d *Decision, bud admitBudget, g canaryGate, left leftSet, settle string) admitted {
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].Canary != cands[j].Canary {
			return cands[i].Canary
		}
		return cands[i].Name < cands[j].Name
	})
	var out admitted
	inFlight, unavailable := bud.inFlight, bud.unavailable
	// The budgets as they will be at the opening, with the nodes next in
	// line for it counted in: how many nodes the event goes to.
	nextInFlight, nextUnavailable := inFlight, unavailable
	for _, c := range cands {
		n := *c
		var why string
		adds := !n.Unschedulable && n.Ready
		own := ownReason(n, b.k)
		held, heldLeft := "", false
		if !n.Canary {
			held, heldLeft = g.holds(b.k)
		}
		fits := ""
		switch {
		case p.MaxParallel > 0 && inFlight >= p.MaxParallel:
			fits = fmt.Sprintf("maxParallelUpgrades %d reached", p.MaxParallel)
		case adds && unavailable+1 > bud.budget:
			fits = fmt.Sprintf("maxUnavailable reached (%d of %d nodes unavailable)", unavailable, bud.budget)
		}
		nextFits := (p.MaxParallel == 0 || nextInFlight < p.MaxParallel) && (!adds || nextUnavailable+1 <= bud.budget)
		switch {
		case p.Paused:
			why = "rollout paused"
		case p.MaxFailures > 0 && bud.failed >= p.MaxFailures:
			why = fmt.Sprintf("failure budget spent (%d failed, maxFailures %d)", bud.failed, p.MaxFailures)
		case own != "":
			why = own
			left[n.Name] = own
		case held != "":
			why = held
			if heldLeft {
				left[n.Name] = held
			}
		case b.win.closed && !n.Approved:
			why = b.win.admissionNote(b, n)
			out.windowWaiting = append(out.windowWaiting, n.Name)
			if nextFits {
				// Next in line for the opening: told, and counted in,
				// so that the event goes to as many nodes as will start
				// then, not to the whole queue.
				d.Announce = append(d.Announce, b.win.admissionEvent(b, n))
				nextInFlight++
				if adds {
					nextUnavailable++
				}
			}
		case settle != "":
			why = settle
			out.settling = true
		default:
			why = fits
		}
		if why != "" {
			d.Waiting[n.Name] = why
			continue
		}
		d.Actions = append(d.Actions, admission(b, n))
		inFlight++
		nextInFlight++
		out.admitted++
		if adds {
			unavailable++
			nextUnavailable++
		}
	}
	return out
}

// admission is the transition that starts n's upgrade.
func admission(b builder, n NodeView) Action {
	a := b.transition(n, contract.StateCordonRequired, "starting driver upgrade "+n.Loaded+" → "+n.Desired)
	if n.WasCordoned == nil {
		// A retried node keeps what was recorded the first time: by now
		// the rollout itself may have cordoned it.
		a.Change.Annotations[b.k.UpgradeWasCordoned()] = kube.Set(strconv.FormatBool(cordonedByAdmin(n)))
	}
	a.Change.Annotations[b.k.UpgradeTarget()] = kube.Set(n.Desired)
	for _, k := range []string{b.k.UpgradeFailureReason(), b.k.UpgradeFailureStep(), b.k.UpgradeBootID(), b.k.UpgradeRerolled()} {
		a.Change.Annotations[k] = nil
	}
	return a
}
