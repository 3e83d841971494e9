// Package rolloutrecord is the bounded record a driver rollout keeps of
// what happened to each node: every upgrade-state change, approval,
// reboot start and new boot, and each run's outcome, with the time the
// rollout saw it. Events expire after an hour and the Node keeps only its
// current state; the record is what `npu-hooks timeline` draws and what
// the fleet exporter reports the rollout's outcome from. It lives in one
// ConfigMap per rollout (per desired driver version), written by the
// rollout controller, capped in entries so it never nears the ConfigMap
// size limit.
//
// This file is the pure model: entries, the cap, the encoding.
package rolloutrecord

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Kind is what an entry records.
type Kind string

const (
	// KindState: the node's driver-upgrade-state changed From → To ("" is
	// no state: up to date, or not started).
	KindState Kind = "state"
	// KindApproved: approve-reboot=true appeared on the node.
	KindApproved Kind = "approved"
	// KindRebooting: the rebooter started a reboot (reboot-from-boot-id).
	KindRebooting Kind = "rebooting"
	// KindBooted: the node reported a new boot ID.
	KindBooted Kind = "booted"
	// KindOutcome: a rollout run ended; To is its outcome (finished,
	// paused, stuck, deadline), Node is empty.
	KindOutcome Kind = "outcome"
)

func knownKind(k Kind) bool {
	switch k {
	case KindState, KindApproved, KindRebooting, KindBooted, KindOutcome:
		return true
	}
	return false
}

// Entry is one thing that happened.
type Entry struct {
	At   time.Time
	Kind Kind
	Node string
	// From and To are states for KindState; To is the outcome for
	// KindOutcome and the reboot's reason for KindRebooting.
	From, To string
}

// Record is one rollout's history.
type Record struct {
	// Name is the ConfigMap's name; Versions the desired driver
	// versions the rollout moves nodes to.
	Name     string
	Versions string
	Entries  []Entry
	// Dropped counts the oldest entries removed to stay within the cap.
	Dropped int
}

// DefaultMaxEntries bounds a record: at about 60 bytes an entry, far
// below a ConfigMap's 1 MiB, and enough for a thousand nodes' upgrades.
const DefaultMaxEntries = 8000

// Append adds entries in order, dropping the oldest beyond max (≤ 0:
// DefaultMaxEntries).
func (r *Record) Append(max int, es ...Entry) {
	if max <= 0 {
		max = DefaultMaxEntries
	}
	r.Entries = append(r.Entries, es...)
	if over := len(r.Entries) - max; over > 0 {
		r.Entries = append([]Entry(nil), r.Entries[over:]...)
		r.Dropped += over
	}
}

// Outcome is the outcome of the newest run that ended, "" while none has
// (the rollout is running).
func (r Record) Outcome() string {
	for i := len(r.Entries) - 1; i >= 0; i-- {
		e := r.Entries[i]
		if e.Kind == KindOutcome {
			return e.To
		}
		if e.Kind == KindState {
			// A state change after the last outcome: a later run moves on.
			return ""
		}
	}
	return ""
}

// Last is when the newest entry was recorded (zero: no entries).
func (r Record) Last() time.Time {
	if len(r.Entries) == 0 {
		return time.Time{}
	}
	return r.Entries[len(r.Entries)-1].At
}

// LastState is the newest recorded state of node and whether any is
// recorded.
func (r Record) LastState(node string) (string, bool) {
	for i := len(r.Entries) - 1; i >= 0; i-- {
		if e := r.Entries[i]; e.Kind == KindState && e.Node == node {
			return e.To, true
		}
	}
	return "", false
}

// Nodes are the nodes the record names, in order of first appearance.
func (r Record) Nodes() []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range r.Entries {
		if e.Node != "" && !seen[e.Node] {
			seen[e.Node] = true
			out = append(out, e.Node)
		}
	}
	return out
}

// The ConfigMap's data keys.
const (
	KeyEntries  = "entries"
	KeyVersions = "versions"
	KeyDropped  = "dropped"
)

// none stands for an empty field in an encoded entry.
const none = "-"

// Encode writes the record as ConfigMap data: one entry a line,
// "<unix ms> <kind> <node> <from> <to>", empty fields as "-".
func (r Record) Encode() map[string]string {
	var b strings.Builder
	field := func(s string) string {
		if s == "" {
			return none
		}
		return s
	}
	for _, e := range r.Entries {
		fmt.Fprintf(&b, "%d %s %s %s %s\n", e.At.UnixMilli(), e.Kind, field(e.Node), field(e.From), field(e.To))
	}
	return map[string]string{KeyEntries: b.String(), KeyVersions: r.Versions, KeyDropped: strconv.Itoa(r.Dropped)}
}

// Decode reads a record written by Encode; name is the ConfigMap's.
func Decode(name string, data map[string]string) (Record, error) {
	r := Record{Name: name, Versions: data[KeyVersions]}
	if d := data[KeyDropped]; d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return r, fmt.Errorf("rollout record %s: %s=%q is not a count; delete the ConfigMap to start the record afresh", name, KeyDropped, d)
		}
		r.Dropped = n
	}
	field := func(s string) string {
		if s == none {
			return ""
		}
		return s
	}
	for i, line := range strings.Split(data[KeyEntries], "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 5 {
			return r, fmt.Errorf("rollout record %s: line %d %q: want 5 fields (time kind node from to); delete the ConfigMap to start the record afresh", name, i+1, line)
		}
		ms, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return r, fmt.Errorf("rollout record %s: line %d: time %q: %w", name, i+1, f[0], err)
		}
		k := Kind(f[1])
		if !knownKind(k) {
			return r, fmt.Errorf("rollout record %s: line %d: unknown kind %q (written by a newer npu-hooks?)", name, i+1, f[1])
		}
		r.Entries = append(r.Entries, Entry{At: time.UnixMilli(ms).UTC(), Kind: k, Node: field(f[2]), From: field(f[3]), To: field(f[4])})
	}
	return r, nil
}

// Name is the ConfigMap name of the record of a rollout to versions:
// <prefix>-record-<versions joined by "-">, made a valid object name.
func Name(prefix string, versions []string) string {
	vs := append([]string(nil), versions...)
	sort.Strings(vs)
	var uniq []string
	for i, v := range vs {
		if i == 0 || v != vs[i-1] {
			uniq = append(uniq, v)
		}
	}
	name := strings.ToLower(prefix + "-record-" + strings.Join(uniq, "-"))
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '-'
	}, name)
	if len(name) > 253 {
		name = name[:253]
	}
	return strings.TrimRight(name, "-.")
}
