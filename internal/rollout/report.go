package rollout

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// StatusRow is one node in `npu-hooks status`.
type StatusRow struct {
	Node           string `json:"node"`
	State          string `json:"state"`
	Loaded         string `json:"loadedVersion"`
	Desired        string `json:"desiredVersion"`
	RebootRequired bool   `json:"rebootRequired"`
	RebootReason   string `json:"rebootReason,omitempty"`
	Approved       bool   `json:"rebootApproved"`
	Ready          bool   `json:"ready"`
	Cordoned       bool   `json:"cordoned"`
	Since          string `json:"since,omitempty"`
	Note           string `json:"note,omitempty"`
	// Blocker is the newest event in which another actor says why the
	// node waits (the rebooter, a refused eviction), with its fix.
	Blocker string `json:"blocker,omitempty"`
	// Install is the driver pod's account of an install on the node
	// (installing, blocked, failed, installed), with its next try.
	Install string `json:"install,omitempty"`
	// Injection is why the node's workloads cannot get the driver's user
	// space (the runtime offers no NRI), from the NRI injector.
	Injection string `json:"injection,omitempty"`
	// sinceTime is when the node entered its state (for Blocker).
	sinceTime time.Time
}

// SinceTime is when the node entered its current state; zero when idle.
func (r StatusRow) SinceTime() time.Time { return r.sinceTime }

// Status is the whole `npu-hooks status` report.
type Status struct {
	Nodes    []StatusRow `json:"nodes"`
	Progress Progress    `json:"progress"`
	Summary  string      `json:"summary"`
	Outcome  Outcome     `json:"outcome"`
	// LeftBehind are the nodes the rollout cannot move (see LeftBehind).
	LeftBehind []LeftBehind `json:"leftBehind,omitempty"`
	// Window is the upgrade maintenance windows: open or closed, until
	// when, and the nodes waiting for them; absent without windows.
	Window *WindowStatus `json:"window,omitempty"`
}

// BuildStatus reports every NPU node of s with d's reasons for waiting.
func BuildStatus(s Snapshot, d Decision, now time.Time) Status {
	st := Status{Progress: d.Progress, Summary: d.Progress.String(), Outcome: d.Outcome, LeftBehind: d.LeftBehind, Window: d.Window}
	for _, n := range s.Nodes {
		r := StatusRow{
			Node: n.Name, State: n.RawState, Loaded: n.Loaded, Desired: n.Desired,
			RebootRequired: n.RebootRequired, RebootReason: n.RebootReason, Approved: n.Approved,
			Ready: n.Ready, Cordoned: n.Unschedulable, Note: d.Waiting[n.Name], Install: n.InstallStatus, Injection: n.Injection,
		}
		if r.State == "" {
			r.State = "up-to-date"
			if n.OutOfDate() {
				r.State = "out-of-date"
			}
		}
		if !n.Since.IsZero() && n.RawState != "" {
			r.Since = now.Sub(n.Since).Truncate(time.Second).String()
			r.sinceTime = n.Since
		}
		if n.ProfileError != "" {
			r.Note = n.ProfileError
		}
		st.Nodes = append(st.Nodes, r)
	}
	return st
}

// PlanEntry is one node in `npu-hooks plan`.
type PlanEntry struct {
	Order  int    `json:"order,omitempty"` // 0 = not planned
	Wave   int    `json:"wave,omitempty"`
	Node   string `json:"node"`
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
	Canary bool   `json:"canary,omitempty"`
	Note   string `json:"note"`
}

// Plan lists which nodes the rollout will take, in which order and waves
// (nodes of one wave run together under maxParallelUpgrades and
// maxUnavailable), and why the others are left out. At now, outside the
// maintenance window, the queued nodes wait for its opening.
func Plan(s Snapshot, p Policy, now time.Time) []PlanEntry {
	win := viewWindows(p.Windows, now)
	budget, _ := ResolveMaxUnavailable(p.MaxUnavailable, len(s.Nodes))
	var todo, rest []PlanEntry
	var todoNodes []NodeView
	baseUnavailable := 0
	for _, n := range s.Nodes {
		if n.Unavailable() && !n.State.InProgress() {
			baseUnavailable++
		}
	}
	for _, n := range s.Nodes {
		e := PlanEntry{Node: n.Name, From: n.Loaded, To: n.Desired, Canary: n.Canary}
		switch {
		case !n.StateKnown:
			e.Note = fmt.Sprintf("unknown state %q: will be marked upgrade-failed", n.RawState)
		case n.ProfileError != "":
			e.Note = "skipped: " + n.ProfileError
		case n.State == contract.StateFailed:
			e.Note = "skipped: failed at " + n.FailureStep + " (" + n.FailureReason + "); relabel upgrade-required to retry"
		case n.State.InProgress():
			e.Note = "in flight (" + string(n.State) + ")"
		case n.Loaded == "":
			e.Note = "skipped for now: driver version not reported yet"
		case !n.OutOfDate():
			e.Note = "up to date"
		case n.Skip:
			e.Note = "skipped: skip label set"
		case !n.Ready:
			e.Note = "left behind: node NotReady (taken up by a later run once it is Ready)"
		case recoveryPending(n):
			e.Note = "left behind: a recovery reboot is pending"
		default:
			todo, todoNodes = append(todo, e), append(todoNodes, n)
			continue
		}
		rest = append(rest, e)
	}
	sort.SliceStable(todoNodes, func(i, j int) bool {
		if todoNodes[i].Canary != todoNodes[j].Canary {
			return todoNodes[i].Canary
		}
		return todoNodes[i].Name < todoNodes[j].Name
	})
	byName := map[string]PlanEntry{}
	for _, e := range todo {
		byName[e.Node] = e
	}
	wave, inWave, cordonedInWave := 1, 0, 0
	prevCanary := true
	var out []PlanEntry
	for i, n := range todoNodes {
		e := byName[n.Name]
		adds := 0
		if !n.Unschedulable {
			adds = 1
		}
		full := p.MaxParallel > 0 && inWave >= p.MaxParallel || baseUnavailable+cordonedInWave+adds > budget && inWave > 0
		if full || (prevCanary && !n.Canary && i > 0) {
			wave, inWave, cordonedInWave = wave+1, 0, 0
		}
		prevCanary = n.Canary
		inWave++
		cordonedInWave += adds
		e.Order, e.Wave = i+1, wave
		switch {
		case p.Paused:
			e.Note = "queued; rollout paused"
		case win.closed && !n.Approved:
			e.Note = "queued; waits for the maintenance window: " + win.describe()
		case n.Canary:
			e.Note = "canary"
		case n.Unschedulable:
			e.Note = "already cordoned: stays cordoned after the upgrade"
		default:
			e.Note = "queued"
		}
		if budget-baseUnavailable < 1 && !n.Unschedulable {
			e.Note = fmt.Sprintf("blocked: maxUnavailable %d already spent by %d unavailable nodes", budget, baseUnavailable)
		}
		out = append(out, e)
	}
	return append(out, rest...)
}

// NoCanaryWarning says, when the policy selects canaries but no NPU node
// matches the selector, that the upgrade has no canary phase: every node
// is a candidate from the start, as if no selector were set. "" when no
// selector is set or a node matches it.
func NoCanaryWarning(s Snapshot, p Policy) string {
	if p.Canary == nil || p.Canary.Empty() {
		return ""
	}
	for _, n := range s.Nodes {
		if n.Canary {
			return ""
		}
	}
	sel := p.Canary.String()
	fix := "label the canary nodes so that they match it"
	if !strings.ContainsAny(sel, " ()!") && !strings.Contains(sel, "!=") && strings.Count(sel, "=") == strings.Count(sel, ",")+1 {
		fix = "label the canary nodes first: kubectl label node <node> " + strings.ReplaceAll(sel, ",", " ")
	}
	return fmt.Sprintf("driver.upgradePolicy.canarySelector %q matches no NPU node, so the upgrade has no canary phase and every node may start at once; %s", sel, fix)
}
