// Package budget is the per-node reboot loop guard. A node whose fault a
// reboot does not fix would otherwise be rebooted forever; the guard lets
// at most Max reboots that failed their purpose happen within one Window
// and then refuses until an administrator, having looked at the node,
// clears the history.
//
// Each reboot is recorded when it starts, with what it is for (an upgrade
// to a driver version, or a recovery); once the node shows whether it
// achieved that, the entry is judged (by the rebooter, see
// internal/reboot) ok or failed. Only entries not judged ok count: a
// reboot that did its job is no loop, however many of them a busy hour
// brings.
//
// The history is persisted in a Node annotation (contract.RebootHistory)
// so the guard survives the reboots it counts.
package budget

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Outcome is what became of a recorded reboot.
type Outcome string

const (
	// Unjudged: an entry without a purpose (written by a rebooter before
	// purposes were recorded); it can never be shown to have worked and
	// always counts.
	Unjudged Outcome = ""
	// Pending: the reboot was started and has not shown yet whether it
	// achieved its purpose. It counts until judged ok.
	Pending Outcome = "pending"
	// OK: the reboot achieved its purpose; it does not count.
	OK Outcome = "ok"
	// Failed: the reboot did not achieve its purpose; it counts.
	Failed Outcome = "failed"
)

// Entry is one reboot.
type Entry struct {
	At time.Time
	// Reason is what the reboot was for: "upgrade", "recovery", or another
	// token for a reboot of no known reason; "" only in an entry without a
	// purpose (Outcome Unjudged).
	Reason string
	// Version is, for an upgrade, the driver version the reboot was to
	// load; "" when the requester named none.
	Version string
	Outcome Outcome
}

// Counts reports whether the entry counts against the budget: every entry
// but one judged OK.
func (e Entry) Counts() bool { return e.Outcome != OK }

// Purpose describes what the reboot was for, for messages.
func (e Entry) Purpose() string {
	switch {
	case e.Reason == "":
		return "reboot of unrecorded purpose"
	case e.Version != "":
		return e.Reason + " to driver " + e.Version
	}
	return e.Reason
}

// String is the entry as the annotation holds it: the RFC 3339 time alone
// for an entry without a purpose (the original format), else
// "<time>;<reason>[:<version>];<outcome>".
func (e Entry) String() string {
	t := e.At.UTC().Format(time.RFC3339)
	if e.Reason == "" && e.Version == "" && e.Outcome == Unjudged {
		return t
	}
	purpose := e.Reason
	if e.Version != "" {
		purpose += ":" + e.Version
	}
	return t + ";" + purpose + ";" + string(e.Outcome)
}

// History is a node's recent reboots, oldest first.
type History []Entry

// Parse reads the annotation value: comma-separated entries, each either
// an RFC 3339 time (written before purposes were recorded) or
// "<time>;<reason>[:<version>];<outcome>" with outcome pending, ok or
// failed.
func Parse(s string) (History, error) {
	var h History
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		e, err := parseEntry(f)
		if err != nil {
			return nil, err
		}
		h = append(h, e)
	}
	sortHistory(h)
	return h, nil
}

func parseEntry(f string) (Entry, error) {
	const want = `want "<RFC 3339 time>" or "<RFC 3339 time>;<upgrade[:<version>]|recovery>;<pending|ok|failed>"`
	parts := strings.Split(f, ";")
	t, err := time.Parse(time.RFC3339, parts[0])
	if err != nil {
		return Entry{}, fmt.Errorf("reboot history entry %q: %q is not an RFC 3339 time; %s", f, parts[0], want)
	}
	e := Entry{At: t}
	switch len(parts) {
	case 1:
		return e, nil
	case 3:
	default:
		return Entry{}, fmt.Errorf("reboot history entry %q has %d fields; %s", f, len(parts), want)
	}
	e.Reason, e.Version, _ = strings.Cut(parts[1], ":")
	if !token(e.Reason) || strings.Contains(parts[1], ":") && !token(e.Version) {
		return Entry{}, fmt.Errorf("reboot history entry %q: purpose %q is not a reason with an optional :version; %s", f, parts[1], want)
	}
	switch o := Outcome(parts[2]); o {
	case Pending, OK, Failed:
		e.Outcome = o
	default:
		return Entry{}, fmt.Errorf("reboot history entry %q: outcome %q is none of pending, ok, failed; %s", f, parts[2], want)
	}
	return e, nil
}

// token: a non-empty word that fits a label value and none of the
// annotation's separators.
func token(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !labelValueRune(r) {
			return false
		}
	}
	return true
}

// ValidToken reports whether s can be recorded as an entry's Reason or
// Version: a label-value word without the annotation's separators.
func ValidToken(s string) bool { return token(s) }

// String is the annotation value.
func (h History) String() string {
	parts := make([]string, len(h))
	for i, e := range h {
		parts[i] = e.String()
	}
	return strings.Join(parts, ",")
}

func sortHistory(h History) {
	slices.SortStableFunc(h, func(a, b Entry) int { return a.At.Compare(b.At) })
}

// counted is the entries that count, oldest first.
func (h History) counted() History {
	var out History
	for _, e := range h {
		if e.Counts() {
			out = append(out, e)
		}
	}
	return out
}

// Budget is at most Max reboots that failed their purpose within Window.
type Budget struct {
	Max    int
	Window time.Duration
}

// Record adds e (a reboot that starts now) to h. Only the newest Max
// counting entries can ever decide Exhausted, so older ones are dropped to
// keep the annotation small, and of the entries judged ok, which only
// inform whoever reads the annotation, the newest Max are kept.
func (b Budget) Record(h History, e Entry) History {
	out := append(append(History{}, h...), e)
	sortHistory(out)
	keep := max(b.Max, 1)
	var counting, ok int
	for i := len(out) - 1; i >= 0; i-- {
		n := &ok
		if out[i].Counts() {
			n = &counting
		}
		if *n++; *n > keep {
			out = slices.Delete(out, i, i+1)
		}
	}
	return out
}

// Add records a reboot at t of no recorded purpose, which always counts
// (the original history format).
func (b Budget) Add(h History, t time.Time) History { return b.Record(h, Entry{At: t}) }

// Exhausted reports whether the newest Max counting reboots all fell
// within one Window: the node is in a reboot loop. It does not depend on
// the current time on purpose: a loop stays refused until someone clears
// the history, instead of resuming silently once the window has passed.
func (b Budget) Exhausted(h History) bool {
	c := h.counted()
	if b.Max <= 0 || len(c) < b.Max {
		return false
	}
	return c[len(c)-1].At.Sub(c[len(c)-b.Max].At) <= b.Window
}

// Loop is the newest Max counting entries when Exhausted (what to name in
// the refusal), else nil.
func (b Budget) Loop(h History) History {
	if !b.Exhausted(h) {
		return nil
	}
	c := h.counted()
	return c[len(c)-b.Max:]
}

// Left is how many more failed reboots the node may take now: Max minus
// the counting reboots within the last Window, and 0 once Exhausted.
func (b Budget) Left(h History, now time.Time) int {
	if b.Exhausted(h) {
		return 0
	}
	used := 0
	for _, e := range h.counted() {
		if now.Sub(e.At) <= b.Window {
			used++
		}
	}
	return max(b.Max-used, 0)
}

// Last is the newest entry and whether there is one.
func (h History) Last() (Entry, bool) {
	if len(h) == 0 {
		return Entry{}, false
	}
	return h[len(h)-1], true
}

// labelValueRune is a character a label value may hold.
func labelValueRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}
