// Package budget is the per-node reboot loop guard. A node whose fault a
// reboot does not fix would otherwise be rebooted forever; the guard lets
// at most Max reboots happen within one Window and then refuses until an
// administrator, having looked at the node, clears the history.
//
// The history is persisted in a Node annotation (contract.RebootHistory)
// so the guard survives the reboots it counts.
package budget

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// History is a node's recent reboot times, oldest first.
type History []time.Time

// Parse reads the annotation value (comma-separated RFC 3339 times).
func Parse(s string) (History, error) {
	var h History
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, f)
		if err != nil {
			return nil, fmt.Errorf("reboot history entry %q is not an RFC 3339 time: %w", f, err)
		}
		h = append(h, t)
	}
	sort.Slice(h, func(i, j int) bool { return h[i].Before(h[j]) })
	return h, nil
}

// String is the annotation value.
func (h History) String() string {
	parts := make([]string, len(h))
	for i, t := range h {
		parts[i] = t.UTC().Format(time.RFC3339)
	}
	return strings.Join(parts, ",")
}

// Budget is at most Max reboots within Window.
type Budget struct {
	Max    int
	Window time.Duration
}

// Add records a reboot at t. Only the newest Max entries can ever decide
// Exhausted, so older ones are dropped to keep the annotation small.
func (b Budget) Add(h History, t time.Time) History {
	out := append(append(History{}, h...), t)
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	if keep := max(b.Max, 1); len(out) > keep {
		out = out[len(out)-keep:]
	}
	return out
}

// Exhausted reports whether the newest Max reboots all fell within one
// Window: the node is in a reboot loop. It does not depend on the current
// time on purpose: a loop stays refused until someone clears the history,
// instead of resuming silently once the window has passed.
func (b Budget) Exhausted(h History) bool {
	if b.Max <= 0 || len(h) < b.Max {
		return false
	}
	return h[len(h)-1].Sub(h[len(h)-b.Max]) <= b.Window
}

// Left is how many more reboots the node may take now: Max minus the
// reboots within the last Window, and 0 once Exhausted.
func (b Budget) Left(h History, now time.Time) int {
	if b.Exhausted(h) {
		return 0
	}
	used := 0
	for _, t := range h {
		if now.Sub(t) <= b.Window {
			used++
		}
	}
	return max(b.Max-used, 0)
}
