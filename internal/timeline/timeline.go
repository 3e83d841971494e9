// Package timeline draws a rollout record (internal/rolloutrecord) as an
// SVG picture: one row per node, a coloured band for each upgrade state
// it was in, approvals and reboots marked, the outcome of each run on the
// time axis. Pure: the same record gives the same bytes.
package timeline

import (
	"time"

	"github.com/openfuyao/npu-stack/internal/rolloutrecord"
)

// Band is a node's stay in one state, [From, To).
type Band struct {
	State    string
	From, To time.Time
}

// Mark is a point event on a node's row.
type Mark struct {
	At   time.Time
	Kind rolloutrecord.Kind
	// Note is the reboot's reason for KindRebooting.
	Note string
}

// Row is one node.
type Row struct {
	Node  string
	Bands []Band
	Marks []Mark
}

// Outcome is the end of a run, on the time axis.
type Outcome struct {
	At      time.Time
	Outcome string
}

// Chart is a record laid out in time: what Render draws.
type Chart struct {
	Title      string
	Start, End time.Time
	Rows       []Row
	Outcomes   []Outcome
	Dropped    int
}

// Build lays the record out: each node's state entries become bands
// (a band before a node's first entry starts at the record's start, in
// that entry's From state; the last runs to end), approvals and reboots
// marks. end is the right edge (the time the picture is made, or the
// record's last entry if later); zero means the last entry.
func Build(r rolloutrecord.Record, end time.Time) Chart {
	c := Chart{Title: title(r), Dropped: r.Dropped}
	if len(r.Entries) == 0 {
		return c
	}
	c.Start = r.Entries[0].At
	c.End = r.Last()
	if end.After(c.End) {
		c.End = end
	}
	rows := map[string]*Row{}
	cur := map[string]*Band{}
	var order []string
	row := func(node string) *Row {
		if rw, ok := rows[node]; ok {
			return rw
		}
		rows[node] = &Row{Node: node}
		order = append(order, node)
		return rows[node]
	}
	for _, e := range r.Entries {
		switch e.Kind {
		case rolloutrecord.KindOutcome:
			c.Outcomes = append(c.Outcomes, Outcome{At: e.At, Outcome: e.To})
			continue
		case rolloutrecord.KindState:
			rw := row(e.Node)
			if b := cur[e.Node]; b != nil {
				b.To = e.At
				rw.Bands = append(rw.Bands, *b)
			} else if e.From != "" {
				rw.Bands = append(rw.Bands, Band{State: e.From, From: c.Start, To: e.At})
			}
			cur[e.Node] = nil
			if e.To != "" {
				cur[e.Node] = &Band{State: e.To, From: e.At}
			}
		default:
			rw := row(e.Node)
			rw.Marks = append(rw.Marks, Mark{At: e.At, Kind: e.Kind, Note: e.To})
		}
	}
	for _, node := range order {
		if b := cur[node]; b != nil {
			b.To = c.End
			rows[node].Bands = append(rows[node].Bands, *b)
		}
		c.Rows = append(c.Rows, *rows[node])
	}
	sortRows(c.Rows)
	return c
}

func title(r rolloutrecord.Record) string {
	t := "rollout " + r.Name
	if r.Versions != "" {
		t += " to driver " + r.Versions
	}
	if o := r.Outcome(); o != "" {
		t += ": " + o
	}
	return t
}

// sortRows orders rows by node name, numbers within names in numeric
// order (npu-2 before npu-10).
func sortRows(rows []Row) {
	for i := 1; i < len(rows); i++ {
		for j := i; j > 0 && naturalLess(rows[j].Node, rows[j-1].Node); j-- {
			rows[j], rows[j-1] = rows[j-1], rows[j]
		}
	}
}

func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := trimZeros(a[:da]), trimZeros(b[:db])
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

func trimZeros(s string) string {
	for len(s) > 1 && s[0] == '0' {
		s = s[1:]
	}
	return s
}
