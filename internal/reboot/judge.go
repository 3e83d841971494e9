package reboot

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/budget"
	"github.com/openfuyao/npu-stack/internal/contract"
)

// The loop guard counts only reboots that did not achieve their purpose
// (docs/self-healing.md, "What the loop guard counts"). A reboot is recorded with its purpose when it starts
// (entryFor) and judged from the node once it is over (judge):
//
//   - upgrade to driver V: achieved once the node's driver-version label
//     is V, the version the rollout wanted (driver-upgrade.target-version)
//     when the reboot started;
//   - recovery: achieved once the chips probe healthy, driver-ready=true
//     with no new recovery request;
//   - anything else (no version recorded, no known reason, an entry of
//     the original format): never shown to have worked.
//
// A reboot not yet judged is judged failed as soon as another reboot is
// asked for: what it was for did not happen before the node needed the
// next one (the wedge came back, the driver did not load its version).
//
// A wedge that ended without a reboot (the chips passed again and the
// health-watch withdrew the recovery request) is recorded by the
// health-watch as failed, purpose contract.PurposeWedge: no reboot
// achieved anything, and a chip that keeps failing and passing must be
// stopped like a reboot loop.

// entryFor is the history entry of a reboot of node n for reason starting
// at now, pending until judged.
func entryFor(n *corev1.Node, k contract.Keys, reason contract.RebootReason, now time.Time) budget.Entry {
	e := budget.Entry{At: now, Reason: string(reason), Outcome: budget.Pending}
	switch {
	case reason == "":
		e.Reason = "unspecified"
	case !budget.ValidToken(string(reason)):
		e.Reason = "other"
	}
	if reason == contract.ReasonUpgrade {
		if v := n.Annotations[k.UpgradeTarget()]; budget.ValidToken(v) {
			e.Version = v
		}
	}
	return e
}

// judged is one entry judge settled, for messages.
type judged struct {
	entry budget.Entry
	why   string
}

func (j judged) String() string {
	return fmt.Sprintf("reboot at %s (%s) %s: %s", j.entry.At.UTC().Format(time.RFC3339), j.entry.Purpose(), j.entry.Outcome, j.why)
}

// judge settles the pending entries of h from node n as it is now.
// requested: another reboot is asked for (reboot-required=true with no
// reboot in flight), so a pending entry that has not shown success failed.
// It returns the new history and what it settled.
func judge(h budget.History, n *corev1.Node, k contract.Keys, requested bool) (budget.History, []judged) {
	var out budget.History
	var settled []judged
	for _, e := range h {
		if e.Outcome == budget.Pending {
			ok, why := achieved(e, n, k)
			switch {
			case ok:
				e.Outcome = budget.OK
				settled = append(settled, judged{e, why})
			case requested:
				e.Outcome = budget.Failed
				settled = append(settled, judged{e, why + ", and another reboot is requested"})
			}
		}
		out = append(out, e)
	}
	return out, settled
}

// achieved reports whether the reboot of e achieved its purpose on n, and
// what shows it either way.
func achieved(e budget.Entry, n *corev1.Node, k contract.Keys) (bool, string) {
	switch contract.RebootReason(e.Reason) {
	case contract.ReasonUpgrade:
		loaded := n.Labels[k.DriverVersion()]
		if e.Version == "" {
			return false, "no driver version was recorded to check"
		}
		if loaded == e.Version {
			return true, fmt.Sprintf("driver %s loaded", loaded)
		}
		if loaded == "" {
			loaded = "none"
		}
		return false, fmt.Sprintf("driver %s loaded, not %s", loaded, e.Version)
	case contract.ReasonRecovery:
		ready := n.Labels[k.DriverReady()] == contract.True
		again := n.Labels[k.RebootRequired()] == contract.True && n.Annotations[k.RebootReason()] == string(contract.ReasonRecovery)
		switch {
		case again:
			return false, "the chips failed again (a new recovery reboot is requested)"
		case ready:
			return true, fmt.Sprintf("the chips probe healthy (%s=true)", k.DriverReady())
		}
		return false, fmt.Sprintf("the chips have not probed healthy (%s is not true)", k.DriverReady())
	}
	return false, "its purpose is unknown"
}

// describeLoop names the counted reboots of a refusal.
// countLoop names what the loop guard counted: reboots, and wedges that
// ended without one, which count the same.
func countLoop(loop budget.History) string {
	wedges := 0
	for _, e := range loop {
		if e.Reason == string(contract.PurposeWedge) {
			wedges++
		}
	}
	plural := func(n int, one, many string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, one)
		}
		return fmt.Sprintf("%d %s", n, many)
	}
	switch reboots := len(loop) - wedges; {
	case wedges == 0:
		return plural(reboots, "reboot", "reboots")
	case reboots == 0:
		return plural(wedges, "wedge", "wedges")
	default:
		return plural(reboots, "reboot", "reboots") + " and " + plural(wedges, "wedge", "wedges")
	}
}

func describeLoop(loop budget.History) string {
	parts := make([]string, len(loop))
	for i, e := range loop {
		at := e.At.UTC().Format(time.RFC3339)
		if e.Reason == string(contract.PurposeWedge) {
			// Recorded by the health-watch: the chips failed, then
			// passed again, and no reboot came in between.
			parts[i] = fmt.Sprintf("wedge at %s ended without a reboot (chips failed, then passed again)", at)
			continue
		}
		parts[i] = fmt.Sprintf("%s at %s", e.Purpose(), at)
		if e.Outcome != budget.Unjudged {
			parts[i] += " " + string(e.Outcome)
		}
	}
	return strings.Join(parts, ", ")
}
