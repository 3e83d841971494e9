package budget

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func at(mins ...int) History {
	var h History
	for _, m := range mins {
		h = append(h, t0.Add(time.Duration(m)*time.Minute))
	}
	return h
}

func TestParseRoundTrip(t *testing.T) {
	h, err := Parse("2026-05-01T12:10:00Z, 2026-05-01T12:00:00Z,")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.String(), "2026-05-01T12:00:00Z,2026-05-01T12:10:00Z"; got != want {
		t.Fatalf("String() = %q, want %q (sorted)", got, want)
	}
	if h, err := Parse(""); err != nil || len(h) != 0 {
		t.Fatalf("empty annotation: %v, %v", h, err)
	}
	if _, err := Parse("yesterday"); err == nil {
		t.Fatal("a garbage entry parsed")
	}
}

func TestBudget(t *testing.T) {
	b := Budget{Max: 3, Window: time.Hour}
	for _, tc := range []struct {
		name      string
		h         History
		now       int
		exhausted bool
		left      int
	}{
		{"no history", nil, 0, false, 3},
		{"one recent", at(0), 10, false, 2},
		{"two recent", at(0, 10), 20, false, 1},
		{"loop: three within the window", at(0, 10, 20), 30, true, 0},
		{"loop stays refused after the window", at(0, 10, 20), 600, true, 0},
		{"spread out: three over three hours", at(0, 90, 180), 200, false, 2},
		{"old entries no longer count", at(0, 10), 200, false, 3},
		{"exactly one window apart is a loop", at(0, 30, 60), 61, true, 0},
		{"only the newest three matter", at(0, 100, 110, 120), 130, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(time.Duration(tc.now) * time.Minute)
			if got := b.Exhausted(tc.h); got != tc.exhausted {
				t.Errorf("Exhausted = %v, want %v", got, tc.exhausted)
			}
			if got := b.Left(tc.h, now); got != tc.left {
				t.Errorf("Left = %d, want %d", got, tc.left)
			}
		})
	}
}

func TestAddKeepsNewest(t *testing.T) {
	b := Budget{Max: 2, Window: time.Hour}
	h := b.Add(at(0, 10), t0.Add(5*time.Minute))
	if got, want := h.String(), at(5, 10).String(); got != want {
		t.Fatalf("Add = %q, want %q", got, want)
	}
}
