package window

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	w, err := Parse("sat,SUN 22:00-04:00 Europe/Berlin wait")
	if err != nil {
		t.Fatal(err)
	}
	if !w.Days[time.Saturday] || !w.Days[time.Sunday] || w.Days[time.Monday] || w.Start != 22*3600 || w.End != 4*3600 || w.Zone.String() != "Europe/Berlin" || w.InFlight != Wait {
		t.Errorf("parsed %+v", w)
	}
	if got := w.String(); got != "sat,sun 22:00-04:00 Europe/Berlin wait" {
		t.Errorf("String() = %q", got)
	}
	w, err = Parse("mon 00:00-24:00 UTC")
	if err != nil || w.End != 24*3600 || w.InFlight != Finish {
		t.Errorf("whole day: %+v, %v", w, err)
	}
	if w, err = Parse("tue 14:00:20-14:01:10 Asia/Shanghai finish"); err != nil || w.Start != 14*3600+20 || w.String() != "tue 14:00:20-14:01:10 Asia/Shanghai" {
		t.Errorf("seconds: %+v, %v", w, err)
	}
}

// Every refusal names what is wrong and what would be right.
func TestParseRefuses(t *testing.T) {
	cases := []struct{ spec, want string }{
		{"sat 22:00-04:00", "want \"<days> <start>-<end> <time zone> [finish|wait]\""},
		{"sa 22:00-04:00 UTC", `days: unknown day "sa": use mon, tue, wed, thu, fri, sat, sun`},
		{"sat,funday 22:00-04:00 UTC", `unknown day "funday"`},
		{"sat 22:00 UTC", "want <start>-<end>"},
		{"sat 22:00-22:00 UTC", "start and end are both 22:00: a window needs a length"},
		{"sat 00:00-00:00 UTC", "a whole day is 00:00-24:00"},
		{"sat 25:00-04:00 UTC", `start: "25:00" is not a time of day`},
		{"sat 22:00-4:00 UTC", `end: "4:00" is not a time of day`},
		{"sat 24:00-04:00 UTC", "24:00 is for ends"},
		{"sat 22:00-24:30 UTC", `end: "24:30": the day ends at 24:00`},
		{"sat 22:00-04:00 Mars/Olympus_Mons", `time zone "Mars/Olympus_Mons" is not an IANA time zone name (such as Europe/Berlin, Asia/Shanghai or UTC)`},
		{"sat 22:00-04:00 Local", "not the machine's local zone"},
		{"sat 22:00-04:00 UTC later", `in-flight "later": want finish or wait`},
	}
	for _, c := range cases {
		_, err := Parse(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", c.spec, err, c.want)
		}
	}
	if _, err := ParseAll([]string{"sat 22:00-04:00 UTC", "xx", "yy"}); err == nil || !strings.Contains(err.Error(), `"xx"`) || !strings.Contains(err.Error(), `"yy"`) {
		t.Errorf("ParseAll names every bad window: %v", err)
	}
}
