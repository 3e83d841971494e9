package budget

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// at is a history of entries without a purpose (the original format).
func at(mins ...int) History {
	var h History
	for _, m := range mins {
		h = append(h, Entry{At: t0.Add(time.Duration(m) * time.Minute)})
	}
	return h
}

// e is an entry at minute m.
func e(m int, reason, version string, o Outcome) Entry {
	return Entry{At: t0.Add(time.Duration(m) * time.Minute), Reason: reason, Version: version, Outcome: o}
}

func TestParseRoundTrip(t *testing.T) {
	h, err := Parse("2026-05-01T12:10:00Z, 2026-05-01T12:00:00Z,")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.String(), "2026-05-01T12:00:00Z,2026-05-01T12:10:00Z"; got != want {
		t.Fatalf("String() = %q, want %q (sorted, original format kept)", got, want)
	}
	if h, err := Parse(""); err != nil || len(h) != 0 {
		t.Fatalf("empty annotation: %v, %v", h, err)
	}

	// Entries with a purpose, mixed with original ones.
	in := "2026-05-01T12:30:00Z;recovery;pending,2026-05-01T12:00:00Z,2026-05-01T12:10:00Z;upgrade:25.5.0;ok,2026-05-01T12:20:00Z;upgrade;failed"
	h, err = Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	want := History{{At: t0}, e(10, "upgrade", "25.5.0", OK), e(20, "upgrade", "", Failed), e(30, "recovery", "", Pending)}
	if len(h) != len(want) {
		t.Fatalf("Parse = %+v, want %+v", h, want)
	}
	for i := range want {
		if !h[i].At.Equal(want[i].At) || h[i].Reason != want[i].Reason || h[i].Version != want[i].Version || h[i].Outcome != want[i].Outcome {
			t.Fatalf("entry %d = %+v, want %+v", i, h[i], want[i])
		}
	}
	if got, want := h.String(), "2026-05-01T12:00:00Z,2026-05-01T12:10:00Z;upgrade:25.5.0;ok,2026-05-01T12:20:00Z;upgrade;failed,2026-05-01T12:30:00Z;recovery;pending"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}

func TestParseRejectsMalformed(t *testing.T) {
	for _, tc := range []struct{ in, says string }{
		{"yesterday", `"yesterday" is not an RFC 3339 time`},
		{"2026-05-01T12:00:00Z;upgrade", "has 2 fields"},
		{"2026-05-01T12:00:00Z;upgrade:25.5.0;ok;extra", "has 4 fields"},
		{"2026-05-01T12:00:00Z;;ok", `purpose ""`},
		{"2026-05-01T12:00:00Z;upgrade:;ok", `purpose "upgrade:"`},
		{"2026-05-01T12:00:00Z;up grade;ok", `purpose "up grade"`},
		{"2026-05-01T12:00:00Z;upgrade:25.5.0;done", `outcome "done"`},
		{"2026-05-01T12:00:00Z;upgrade:25.5.0;", `outcome ""`},
		{"noon;recovery;ok", `"noon" is not an RFC 3339 time`},
	} {
		_, err := Parse("2026-05-01T11:00:00Z," + tc.in)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", tc.in)
			continue
		}
		for _, s := range []string{tc.says, "<pending|ok|failed>"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("Parse(%q) = %v, want it to say %q", tc.in, err, s)
			}
		}
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

		{"reboots that achieved their purpose do not count",
			History{e(0, "upgrade", "25.5.0", OK), e(10, "upgrade", "25.3.0", OK), e(20, "upgrade", "25.6.0", OK), e(30, "upgrade", "25.7.0", OK)}, 40, false, 3},
		{"failed reboots count",
			History{e(0, "upgrade", "25.6.0", Failed), e(10, "upgrade", "25.6.0", Failed), e(20, "upgrade", "25.6.0", Failed)}, 30, true, 0},
		{"a pending reboot counts until judged ok",
			History{e(0, "recovery", "", Failed), e(10, "recovery", "", Failed), e(20, "recovery", "", Pending)}, 30, true, 0},
		{"ok entries between failed ones do not stretch or fill the window",
			History{e(0, "recovery", "", Failed), e(5, "upgrade", "25.5.0", OK), e(10, "recovery", "", Failed), e(15, "upgrade", "25.3.0", OK), e(20, "recovery", "", Failed)}, 30, true, 0},
		{"original entries count with judged ones",
			History{{At: t0}, e(10, "upgrade", "25.5.0", OK), e(20, "recovery", "", Failed)}, 30, false, 1},
		{"original and failed entries make a loop",
			History{{At: t0}, {At: t0.Add(10 * time.Minute)}, e(20, "recovery", "", Failed)}, 30, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(time.Duration(tc.now) * time.Minute)
			if got := b.Exhausted(tc.h); got != tc.exhausted {
				t.Errorf("Exhausted = %v, want %v", got, tc.exhausted)
			}
			if got := b.Left(tc.h, now); got != tc.left {
				t.Errorf("Left = %d, want %d", got, tc.left)
			}
			if loop := b.Loop(tc.h); (loop != nil) != tc.exhausted || loop != nil && len(loop) != b.Max {
				t.Errorf("Loop = %v, want the newest %d counting entries iff exhausted", loop, b.Max)
			}
		})
	}
}

func TestLoopNamesTheNewestCountingReboots(t *testing.T) {
	b := Budget{Max: 2, Window: time.Hour}
	h := History{e(0, "recovery", "", Failed), e(10, "upgrade", "25.5.0", OK), e(20, "recovery", "", Failed), e(30, "recovery", "", Failed)}
	want := History{h[2], h[3]}
	if got := b.Loop(h).String(); got != want.String() {
		t.Fatalf("Loop = %q, want %q", got, want)
	}
}

func TestAddKeepsNewest(t *testing.T) {
	b := Budget{Max: 2, Window: time.Hour}
	h := b.Add(at(0, 10), t0.Add(5*time.Minute))
	if got, want := h.String(), at(5, 10).String(); got != want {
		t.Fatalf("Add = %q, want %q", got, want)
	}
}

func TestRecordKeepsNewestOfEachKind(t *testing.T) {
	b := Budget{Max: 2, Window: time.Hour}
	h := History{e(0, "upgrade", "1", OK), e(1, "recovery", "", Failed), e(2, "upgrade", "2", OK), e(3, "upgrade", "3", OK), e(4, "recovery", "", Failed)}
	got := b.Record(h, e(5, "recovery", "", Pending))
	// The newest two counting entries (one failed, the new pending one)
	// and the newest two ok ones.
	want := History{e(2, "upgrade", "2", OK), e(3, "upgrade", "3", OK), e(4, "recovery", "", Failed), e(5, "recovery", "", Pending)}
	if got.String() != want.String() {
		t.Fatalf("Record = %q, want %q", got, want)
	}
	if h[0].Outcome != OK || len(h) != 5 {
		t.Fatal("Record changed its argument")
	}
}

func TestEntryPurpose(t *testing.T) {
	cases := []struct {
		e    Entry
		want string
	}{
		{Entry{At: t0}, "reboot of unrecorded purpose"},
		{e(0, "upgrade", "25.5.0", Pending), "upgrade to driver 25.5.0"},
		{e(0, "upgrade", "", Pending), "upgrade"},
		{e(0, "recovery", "", Pending), "recovery"},
	}
	for _, tc := range cases {
		if got := tc.e.Purpose(); got != tc.want {
			t.Errorf("Purpose(%+v) = %q, want %q", tc.e, got, tc.want)
		}
	}
}
