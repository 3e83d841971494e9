package window

import (
	"sort"
	"time"
)

// Occurrence is one opening of a window, from Start to End (excluded).
type Occurrence struct {
	Window     Window
	Start, End time.Time
}

// Open reports whether s is open at now, and when that changes: when
// open, the end of the stretch of time the windows keep it open (windows
// that overlap or touch count as one); when closed, the next opening. An
// empty schedule is always open and never changes (next is zero).
func Open(s Schedule, now time.Time) (open bool, next time.Time) {
	if s.Always() {
		return true, time.Time{}
	}
	occ := s.around(now)
	end, open := time.Time{}, false
	for _, o := range occ {
		if o.contains(now) && o.End.After(end) {
			end, open = o.End, true
		}
	}
	if !open {
		n, _ := s.Next(now)
		return false, n.Start
	}
	// Extend through windows that begin before the stretch ends.
	for extended := true; extended; {
		extended = false
		for _, o := range occ {
			if o.contains(end) {
				end, extended = o.End, true
			}
		}
	}
	return true, end
}

// Next is the first occurrence of s to open after now; false for an
// empty schedule.
func (s Schedule) Next(now time.Time) (Occurrence, bool) {
	var best Occurrence
	found := false
	for _, o := range s.around(now) {
		if o.Start.After(now) && (!found || o.Start.Before(best.Start)) {
			best, found = o, true
		}
	}
	return best, found
}

// Current is the occurrence of s open at now that closes last; false
// when none is open (or s is empty).
func (s Schedule) Current(now time.Time) (Occurrence, bool) {
	var best Occurrence
	found := false
	for _, o := range s.around(now) {
		if o.contains(now) && (!found || o.End.After(best.End)) {
			best, found = o, true
		}
	}
	return best, found
}

// LastClosed is the occurrence of s that closed most recently, at or
// before now; its InFlight says what the nodes it leaves in flight do.
// When two closed at the same moment, the one that says wait wins: a
// reboot held needlessly is the safer mistake.
func (s Schedule) LastClosed(now time.Time) (Occurrence, bool) {
	var best Occurrence
	found := false
	for _, o := range s.around(now) {
		if o.End.After(now) {
			continue
		}
		switch {
		case !found, o.End.After(best.End):
			best, found = o, true
		case o.End.Equal(best.End) && o.Window.InFlight == Wait:
			best = o
		}
	}
	return best, found
}

// InFlightNow is what nodes past their cordon do at now: Finish while s
// is open (or empty), else what the window that closed last says.
func (s Schedule) InFlightNow(now time.Time) InFlight {
	if open, _ := Open(s, now); open {
		return Finish
	}
	if o, ok := s.LastClosed(now); ok {
		return o.Window.InFlight
	}
	return Finish
}

func (o Occurrence) contains(t time.Time) bool {
	return !t.Before(o.Start) && t.Before(o.End)
}

// around lists the occurrences of s that start from eight days before now
// to eight days after, sorted by start: every window opens at least once
// a week and lasts at most a day (a little more across a DST change), so
// these hold the one open at now, the next opening and the last closing.
func (s Schedule) around(now time.Time) []Occurrence {
	var out []Occurrence
	for _, w := range s {
		out = append(out, w.occurrences(now, -8, 8)...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// occurrences are w's openings on the dates from `from` to `to` days
// around t's date on w's clock. One the clock skips entirely (a window
// inside the hour lost to a spring-forward change) is left out.
func (w Window) occurrences(t time.Time, from, to int) []Occurrence {
	loc := w.Zone
	if loc == nil {
		loc = time.UTC
	}
	local := t.In(loc)
	var out []Occurrence
	for i := from; i <= to; i++ {
		// Noon UTC of the civil date: date arithmetic free of DST.
		day := time.Date(local.Year(), local.Month(), local.Day()+i, 12, 0, 0, 0, time.UTC)
		if !w.Days[day.Weekday()] {
			continue
		}
		endDay, end := day, w.End
		if w.End <= w.Start {
			endDay = day.AddDate(0, 0, 1)
		}
		o := Occurrence{Window: w, Start: wall(day, w.Start, loc), End: wall(endDay, end, loc)}
		if o.Start.Before(o.End) {
			out = append(out, o)
		}
	}
	return out
}

// wall is the first instant at which loc's clock shows secs after
// midnight of day (a civil date, at noon UTC) or later. Go's time.Date
// picks the later reading of a repeated hour and shifts a skipped time
// forward by the gap, so both readings are tried: the earlier valid one
// wins, and in a gap the moment of the jump is the answer.
func wall(day time.Time, secs int, loc *time.Location) time.Time {
	day = day.AddDate(0, 0, secs/(24*3600))
	secs %= 24 * 3600
	naive := time.Date(day.Year(), day.Month(), day.Day(), secs/3600, secs/60%60, secs%60, 0, time.UTC)
	_, before := naive.Add(-24 * time.Hour).In(loc).Zone()
	_, after := naive.Add(24 * time.Hour).In(loc).Zone()
	var best time.Time
	for _, off := range []int{before, after} {
		c := naive.Add(-time.Duration(off) * time.Second)
		if sameWall(c.In(loc), naive) && (best.IsZero() || c.Before(best)) {
			best = c
		}
	}
	if !best.IsZero() {
		return best
	}
	// A skipped time: read with the offset before the jump it falls
	// after the jump; the jump is where that reading's zone period begins.
	start, _ := naive.Add(-time.Duration(before) * time.Second).In(loc).ZoneBounds()
	return start
}

func sameWall(t, naive time.Time) bool {
	y, m, d := t.Date()
	ny, nm, nd := naive.Date()
	return y == ny && m == nm && d == nd && t.Hour() == naive.Hour() && t.Minute() == naive.Minute() && t.Second() == naive.Second()
}
