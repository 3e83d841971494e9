package window

import (
	"testing"
	"time"
)

func mustParse(t *testing.T, specs ...string) Schedule {
	t.Helper()
	s, err := ParseAll(specs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// at is a wall time in zone.
func at(t *testing.T, zone, s string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04:05", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func utc(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestOpen(t *testing.T) {
	type check struct {
		now  time.Time
		open bool
		next time.Time
	}
	berlin := func(s string) time.Time { return at(t, "Europe/Berlin", s) }
	cases := []struct {
		name   string
		specs  []string
		checks []check
	}{
		{name: "no window: always open", checks: []check{{now: utc(t, "2026-05-05T14:00:00Z"), open: true}}},
		{
			// 2026-05-05 is a Tuesday.
			name:  "weekday evening, UTC",
			specs: []string{"mon,tue,wed,thu,fri 18:00-20:00 UTC"},
			checks: []check{
				{now: utc(t, "2026-05-05T14:00:00Z"), next: utc(t, "2026-05-05T18:00:00Z")},
				{now: utc(t, "2026-05-05T18:00:00Z"), open: true, next: utc(t, "2026-05-05T20:00:00Z")},
				{now: utc(t, "2026-05-05T19:59:59Z"), open: true, next: utc(t, "2026-05-05T20:00:00Z")},
				{now: utc(t, "2026-05-05T20:00:00Z"), next: utc(t, "2026-05-06T18:00:00Z")},
				// Friday evening: next is Monday.
				{now: utc(t, "2026-05-08T21:00:00Z"), next: utc(t, "2026-05-11T18:00:00Z")},
			},
		},
		{
			// The window belongs to the day it starts: Saturday 22:00 to
			// Sunday 04:00, not Saturday 00:00-04:00 as kured reads it.
			name:  "crossing midnight belongs to its start day",
			specs: []string{"sat 22:00-04:00 Asia/Shanghai"},
			checks: []check{
				{now: at(t, "Asia/Shanghai", "2026-05-09 02:00:00"), next: at(t, "Asia/Shanghai", "2026-05-09 22:00:00")},
				{now: at(t, "Asia/Shanghai", "2026-05-09 22:00:00"), open: true, next: at(t, "Asia/Shanghai", "2026-05-10 04:00:00")},
				{now: at(t, "Asia/Shanghai", "2026-05-10 03:59:00"), open: true, next: at(t, "Asia/Shanghai", "2026-05-10 04:00:00")},
				{now: at(t, "Asia/Shanghai", "2026-05-10 04:00:00"), next: at(t, "Asia/Shanghai", "2026-05-16 22:00:00")},
				// The same instant in UTC: the zone, not the machine, decides.
				{now: utc(t, "2026-05-09T14:30:00Z"), open: true, next: utc(t, "2026-05-09T20:00:00Z")},
			},
		},
		{
			name:  "seconds resolution",
			specs: []string{"tue 14:00:20-14:01:10 UTC"},
			checks: []check{
				{now: utc(t, "2026-05-05T14:00:19Z"), next: utc(t, "2026-05-05T14:00:20Z")},
				{now: utc(t, "2026-05-05T14:00:20Z"), open: true, next: utc(t, "2026-05-05T14:01:10Z")},
			},
		},
		{
			name:  "whole days touch: one stretch",
			specs: []string{"sat,sun 00:00-24:00 UTC"},
			checks: []check{
				{now: utc(t, "2026-05-09T10:00:00Z"), open: true, next: utc(t, "2026-05-11T00:00:00Z")},
				{now: utc(t, "2026-05-08T10:00:00Z"), next: utc(t, "2026-05-09T00:00:00Z")},
			},
		},
		{
			name:  "several windows in several zones",
			specs: []string{"tue 02:00-04:00 Europe/Berlin", "tue 01:30-03:00 UTC wait"},
			checks: []check{
				// Tuesday 2026-05-05: Berlin 02:00-04:00 is 00:00-02:00 UTC,
				// then the UTC window 01:30-03:00 overlaps: open 00:00-03:00.
				{now: utc(t, "2026-05-04T23:00:00Z"), next: utc(t, "2026-05-05T00:00:00Z")},
				{now: utc(t, "2026-05-05T00:30:00Z"), open: true, next: utc(t, "2026-05-05T03:00:00Z")},
				{now: utc(t, "2026-05-05T02:30:00Z"), open: true, next: utc(t, "2026-05-05T03:00:00Z")},
				{now: utc(t, "2026-05-05T03:00:00Z"), next: utc(t, "2026-05-12T00:00:00Z")},
			},
		},
		{
			// Berlin springs forward on Sunday 2026-03-29 at 02:00 CET to
			// 03:00 CEST: that night is an hour shorter on the clock.
			name:  "spring forward, Europe/Berlin 2026-03-29",
			specs: []string{"sat 23:00-05:00 Europe/Berlin"},
			checks: []check{
				{now: berlin("2026-03-28 22:59:00"), next: utc(t, "2026-03-28T22:00:00Z")},
				{now: berlin("2026-03-28 23:00:00"), open: true, next: utc(t, "2026-03-29T03:00:00Z")},
				// 04:30 CEST is 02:30 UTC: still open; six hours on the
				// clock, five in time.
				{now: utc(t, "2026-03-29T02:30:00Z"), open: true, next: utc(t, "2026-03-29T03:00:00Z")},
				{now: utc(t, "2026-03-29T03:00:00Z"), next: utc(t, "2026-04-04T21:00:00Z")},
			},
		},
		{
			// A boundary in the skipped hour is the moment of the jump.
			name:  "spring forward, start in the skipped hour",
			specs: []string{"sun 02:30-06:00 Europe/Berlin"},
			checks: []check{
				{now: utc(t, "2026-03-29T00:59:00Z"), next: utc(t, "2026-03-29T01:00:00Z")},
				{now: utc(t, "2026-03-29T01:00:00Z"), open: true, next: utc(t, "2026-03-29T04:00:00Z")},
				// A week later, summer time: 02:30 CEST is 00:30 UTC.
				{now: utc(t, "2026-04-05T00:00:00Z"), next: utc(t, "2026-04-05T00:30:00Z")},
			},
		},
		{
			// Falls back on Sunday 2026-10-25 at 03:00 CEST to 02:00 CET:
			// the night is an hour longer on the clock.
			name:  "fall back, Europe/Berlin 2026-10-25",
			specs: []string{"sat 23:00-05:00 Europe/Berlin"},
			checks: []check{
				{now: berlin("2026-10-24 23:00:00"), open: true, next: utc(t, "2026-10-25T04:00:00Z")},
				// 02:30 comes twice; both passes are inside.
				{now: utc(t, "2026-10-25T00:30:00Z"), open: true, next: utc(t, "2026-10-25T04:00:00Z")},
				{now: utc(t, "2026-10-25T01:30:00Z"), open: true, next: utc(t, "2026-10-25T04:00:00Z")},
				{now: utc(t, "2026-10-25T04:00:00Z"), next: utc(t, "2026-10-31T22:00:00Z")},
			},
		},
		{
			// An end in the repeated hour is its first pass (CEST).
			name:  "fall back, end in the repeated hour",
			specs: []string{"sun 01:00-02:30 Europe/Berlin"},
			checks: []check{
				{now: utc(t, "2026-10-24T23:00:00Z"), open: true, next: utc(t, "2026-10-25T00:30:00Z")},
				{now: utc(t, "2026-10-25T00:30:00Z"), next: utc(t, "2026-11-01T00:00:00Z")},
				// The second 02:30 (CET) is outside.
				{now: utc(t, "2026-10-25T01:15:00Z"), next: utc(t, "2026-11-01T00:00:00Z")},
			},
		},
		{
			// The clock skips 02:00-03:00 on that Sunday: the window does
			// not open that day, and the next opening is a week later.
			name:  "a window inside the skipped hour does not open that day",
			specs: []string{"sun 02:10-02:50 Europe/Berlin"},
			checks: []check{
				{now: utc(t, "2026-03-28T23:00:00Z"), next: utc(t, "2026-04-05T00:10:00Z")},
				{now: utc(t, "2026-03-29T01:00:00Z"), next: utc(t, "2026-04-05T00:10:00Z")},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParse(t, tc.specs...)
			for _, c := range tc.checks {
				open, next := Open(s, c.now)
				if open != c.open || !next.Equal(c.next) {
					t.Errorf("Open(%v, %s) = %t, %s; want %t, %s", s.Specs(), c.now.UTC().Format(time.RFC3339), open, fmtT(next), c.open, fmtT(c.next))
				}
			}
		})
	}
}

func fmtT(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

// What nodes in flight do when the schedule closes is the InFlight of the
// window that closed last.
func TestInFlightNow(t *testing.T) {
	s := mustParse(t, "tue 02:00-04:00 UTC wait", "sat 00:00-24:00 UTC")
	cases := []struct {
		now  string
		want InFlight
	}{
		{"2026-05-05T03:00:00Z", Finish}, // open: nothing is late
		{"2026-05-05T04:00:00Z", Wait},   // Tuesday's closed last
		{"2026-05-08T12:00:00Z", Wait},   // still Tuesday's, on Friday
		{"2026-05-10T01:00:00Z", Finish}, // Saturday's closed last
	}
	for _, c := range cases {
		if got := s.InFlightNow(utc(t, c.now)); got != c.want {
			t.Errorf("InFlightNow(%s) = %s, want %s", c.now, got, c.want)
		}
	}
	if got := (Schedule{}).InFlightNow(utc(t, "2026-05-05T04:00:00Z")); got != Finish {
		t.Errorf("no window: %s, want finish", got)
	}
	// Two windows closing together: wait wins.
	both := mustParse(t, "tue 01:00-04:00 UTC", "tue 02:00-04:00 UTC wait")
	if got := both.InFlightNow(utc(t, "2026-05-05T05:00:00Z")); got != Wait {
		t.Errorf("closing together: %s, want wait", got)
	}
}

func TestDescribe(t *testing.T) {
	s := mustParse(t, "sat,sun 22:00-04:00 Europe/Berlin wait")
	now := utc(t, "2026-05-02T16:55:00Z") // Saturday 18:55 CEST
	st, ok := At(s, now)
	if !ok {
		t.Fatal("a schedule with windows has a state")
	}
	want := "closed until 2026-05-02T22:00:00+02:00 (in 3h5m0s, window sat,sun 22:00-04:00 Europe/Berlin wait)"
	if got := st.Describe(now); got != want {
		t.Errorf("Describe = %q\nwant       %q", got, want)
	}
	st, _ = At(s, utc(t, "2026-05-02T21:00:00Z"))
	if !st.Open || st.Until() != "2026-05-03T04:00:00+02:00" {
		t.Errorf("at 23:00 CEST: open %t until %s; want open until Sunday 04:00", st.Open, st.Until())
	}
	if _, ok := At(nil, now); ok {
		t.Error("no window: At says something")
	}
}
