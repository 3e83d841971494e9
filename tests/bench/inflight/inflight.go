// Package inflight records how many nodes an upgrade had in progress at
// once, from the node states a watch saw. The physical limit of a rollout,
// ceil(N/p) × t, holds only for a side that keeps at most p nodes in
// progress: a side that had more at once can finish under it, and this
// record is what shows it did.
package inflight

import (
	"fmt"
	"io"
	"sort"
	"time"
)

// Interval is one node's time in progress, [Start, End): from the state
// change that admitted it to the one that took it out of progress, as a
// watch saw them. End is zero for a node still in progress when the
// record ended.
type Interval struct {
	Node       string
	Start, End time.Time
}

// Tracker turns a watch's observations of each node into intervals. The
// observations of one node must come in the order they were seen; it is
// not safe for concurrent use.
type Tracker struct {
	open map[string]time.Time
	done []Interval
}

// Observe records node seen at at, in progress or not. Only changes
// matter: a node seen in progress again stays in the interval it is in.
func (t *Tracker) Observe(node string, at time.Time, inProgress bool) {
	if t.open == nil {
		t.open = map[string]time.Time{}
	}
	start, was := t.open[node]
	switch {
	case inProgress && !was:
		t.open[node] = at
	case !inProgress && was:
		t.done = append(t.done, Interval{Node: node, Start: start, End: at})
		delete(t.open, node)
	}
}

// Intervals are the intervals recorded, each node still in progress
// closed at end (if end is zero, left open), sorted by start.
func (t *Tracker) Intervals(end time.Time) []Interval {
	out := append([]Interval(nil), t.done...)
	for n, s := range t.open {
		out = append(out, Interval{Node: n, Start: s, End: end})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Start.Equal(out[j].Start) {
			return out[i].Start.Before(out[j].Start)
		}
		return out[i].Node < out[j].Node
	})
	return out
}

// Point is the number of nodes in progress from At until the next point.
type Point struct {
	At time.Time
	N  int
}

// Curve is the number of nodes in progress over time: one point at each
// instant the number changed. Intervals are half-open, so a node taken
// out of progress at the instant another is admitted does not count with
// it; an interval without an end counts until the last point.
func Curve(ivs []Interval) []Point {
	type edge struct {
		at    time.Time
		delta int
	}
	var es []edge
	for _, iv := range ivs {
		if !iv.End.IsZero() && !iv.End.After(iv.Start) {
			continue // empty: seen in and out of progress at once
		}
		es = append(es, edge{iv.Start, 1})
		if !iv.End.IsZero() {
			es = append(es, edge{iv.End, -1})
		}
	}
	sort.SliceStable(es, func(i, j int) bool { return es[i].at.Before(es[j].at) })
	var out []Point
	n := 0
	for i := 0; i < len(es); {
		at := es[i].at
		for ; i < len(es) && es[i].at.Equal(at); i++ {
			n += es[i].delta
		}
		if len(out) > 0 && out[len(out)-1].N == n {
			continue
		}
		out = append(out, Point{At: at, N: n})
	}
	return out
}

// Summary is what the report keeps of a side's curve.
type Summary struct {
	// Max is the most nodes in progress at once, first reached at MaxAt.
	Max   int
	MaxAt time.Time
	// Over is the time more than the limit were in progress (zero when
	// the limit is 0 or less: unlimited).
	Over time.Duration
	// Nodes is the number of intervals (node upgrades) with an end, Mean
	// their mean length: a node's cycle from admission to out of progress.
	Nodes int
	Mean  time.Duration
}

// Summarize summarizes intervals against a parallelism limit.
func Summarize(ivs []Interval, limit int) Summary {
	var s Summary
	var sum time.Duration
	for _, iv := range ivs {
		if !iv.End.IsZero() && !iv.End.Before(iv.Start) {
			s.Nodes++
			sum += iv.End.Sub(iv.Start)
		}
	}
	if s.Nodes > 0 {
		s.Mean = sum / time.Duration(s.Nodes)
	}
	c := Curve(ivs)
	for i, p := range c {
		if p.N > s.Max {
			s.Max, s.MaxAt = p.N, p.At
		}
		if limit > 0 && p.N > limit && i+1 < len(c) {
			s.Over += c[i+1].At.Sub(p.At)
		}
	}
	return s
}

// WriteCurve writes c as tab-separated lines: seconds from origin, nodes
// in progress from then on.
func WriteCurve(w io.Writer, c []Point, origin time.Time) error {
	if _, err := fmt.Fprintln(w, "seconds\tin_progress"); err != nil {
		return fmt.Errorf("write the in-progress curve: %w", err)
	}
	for _, p := range c {
		if _, err := fmt.Fprintf(w, "%.3f\t%d\n", p.At.Sub(origin).Seconds(), p.N); err != nil {
			return fmt.Errorf("write the in-progress curve: %w", err)
		}
	}
	return nil
}
