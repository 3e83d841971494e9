package window

import (
	"fmt"
	"time"
)

// State is a schedule as seen at one moment, for status lines and
// messages.
type State struct {
	Open bool
	// Next is when that changes: the close of the open stretch, or the
	// next opening.
	Next time.Time
	// Window is the window that closes or opens at Next.
	Window Window
}

// At is s at now; false when s is always open (nothing to say).
func At(s Schedule, now time.Time) (State, bool) {
	if s.Always() {
		return State{}, false
	}
	open, next := Open(s, now)
	st := State{Open: open, Next: next}
	for _, o := range s.around(now) {
		if (open && o.End.Equal(next)) || (!open && o.Start.Equal(next)) {
			st.Window = o.Window
			break
		}
	}
	return st, true
}

// Until is st.Next on its window's clock, as RFC 3339 with the offset.
func (st State) Until() string {
	loc := st.Window.Zone
	if loc == nil {
		loc = time.UTC
	}
	return st.Next.In(loc).Format(time.RFC3339)
}

// Describe says whether the schedule is open and until when, with how
// long that is from now and the window that changes it:
// "closed until 2026-05-02T22:00:00+02:00 (in 3h5m, window sat,sun
// 22:00-04:00 Europe/Berlin wait)".
func (st State) Describe(now time.Time) string {
	word := "closed"
	if st.Open {
		word = "open"
	}
	return fmt.Sprintf("%s until %s (in %s, window %s)", word, st.Until(), Round(st.Next.Sub(now)), st.Window)
}

// Round shortens a wait for humans: whole minutes from a minute on, whole
// seconds below.
func Round(d time.Duration) time.Duration {
	if d >= time.Minute {
		return d.Round(time.Minute)
	}
	return d.Round(time.Second)
}
