package timeline

import (
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/openfuyao/npu-stack/internal/rolloutrecord"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func record() rolloutrecord.Record {
	st := func(s int, node, from, to string) rolloutrecord.Entry {
		return rolloutrecord.Entry{At: at(s), Kind: rolloutrecord.KindState, Node: node, From: from, To: to}
	}
	mk := func(s int, node string, k rolloutrecord.Kind) rolloutrecord.Entry {
		return rolloutrecord.Entry{At: at(s), Kind: k, Node: node, To: "upgrade"}
	}
	return rolloutrecord.Record{Name: "npu-stack-rollout-record-25.5.0", Versions: "25.5.0", Entries: []rolloutrecord.Entry{
		st(0, "npu-10", "", "upgrade-required"), st(0, "npu-2", "", "upgrade-required"),
		st(1, "npu-2", "upgrade-required", "reboot-required"),
		mk(20, "npu-2", rolloutrecord.KindApproved), mk(21, "npu-2", rolloutrecord.KindRebooting), mk(30, "npu-2", rolloutrecord.KindBooted),
		st(31, "npu-2", "reboot-required", "validation-required"), st(35, "npu-2", "validation-required", ""),
		// npu-10's record starts mid-way (the oldest entries dropped).
		st(40, "npu-7", "drain-required", "upgrade-failed"),
		{At: at(60), Kind: rolloutrecord.KindOutcome, To: "stuck"},
	}}
}

func TestBuild(t *testing.T) {
	c := Build(record(), time.Time{})
	if !c.Start.Equal(at(0)) || !c.End.Equal(at(60)) {
		t.Fatalf("span %s..%s", c.Start, c.End)
	}
	var names []string
	for _, r := range c.Rows {
		names = append(names, r.Node)
	}
	if got := strings.Join(names, " "); got != "npu-2 npu-7 npu-10" {
		t.Fatalf("rows %q, want nodes in natural order", got)
	}
	n2 := c.Rows[0]
	want := []Band{{"upgrade-required", at(0), at(1)}, {"reboot-required", at(1), at(31)}, {"validation-required", at(31), at(35)}}
	if len(n2.Bands) != len(want) {
		t.Fatalf("npu-2 bands %+v", n2.Bands)
	}
	for i := range want {
		if n2.Bands[i] != want[i] {
			t.Errorf("npu-2 band %d = %+v, want %+v", i, n2.Bands[i], want[i])
		}
	}
	if len(n2.Marks) != 3 {
		t.Errorf("npu-2 marks %+v, want approved, rebooting, booted", n2.Marks)
	}
	n7 := c.Rows[1]
	if len(n7.Bands) != 2 || n7.Bands[0].State != "drain-required" || !n7.Bands[0].From.Equal(at(0)) || n7.Bands[1].State != "upgrade-failed" || !n7.Bands[1].To.Equal(at(60)) {
		t.Errorf("npu-7 bands %+v: want drain-required from the record's start, then upgrade-failed to its end", n7.Bands)
	}
	if n10 := c.Rows[2]; len(n10.Bands) != 1 || !n10.Bands[0].To.Equal(at(60)) {
		t.Errorf("npu-10 bands %+v: want upgrade-required to the end", n10.Bands)
	}
	if len(c.Outcomes) != 1 || c.Outcomes[0].Outcome != "stuck" || !strings.HasSuffix(c.Title, ": stuck") {
		t.Errorf("outcomes %+v, title %q", c.Outcomes, c.Title)
	}
}

func TestRenderIsWellFormedSVG(t *testing.T) {
	out := Render(Build(record(), at(65)))
	d := xml.NewDecoder(strings.NewReader(string(out)))
	elems := map[string]int{}
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("not well-formed XML: %v\n%s", err, out)
		}
		if se, ok := tok.(xml.StartElement); ok {
			elems[se.Name.Local]++
		}
	}
	if elems["svg"] != 1 {
		t.Fatalf("%d svg elements", elems["svg"])
	}
	// 6 bands + 1 background + stripe + legend boxes (9).
	if elems["rect"] < 6+9 {
		t.Errorf("%d rects, want the bands and the legend", elems["rect"])
	}
	for _, s := range []string{"npu-2", "npu-10", "reboot approved", "new boot", "run stuck", "reboot-required for 30s", "+1m"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("the picture lacks %q", s)
		}
	}
	if string(Render(Build(record(), at(65)))) != string(out) {
		t.Error("two renders of one record differ")
	}
}

func TestRenderEmptyRecord(t *testing.T) {
	out := string(Render(Build(rolloutrecord.Record{Name: "r"}, time.Time{})))
	if !strings.Contains(out, "no node changed state") || !strings.HasSuffix(out, "</svg>\n") {
		t.Fatalf("empty record:\n%s", out)
	}
}

func TestTickStep(t *testing.T) {
	for span, want := range map[time.Duration]time.Duration{
		5 * time.Second: time.Second, 90 * time.Second: 10 * time.Second, 7 * time.Minute: time.Minute,
		3 * time.Hour: 30 * time.Minute, 20 * 24 * time.Hour: 48 * time.Hour,
	} {
		if got := TickStep(span); got != want {
			t.Errorf("TickStep(%s) = %s, want %s", span, got, want)
		}
	}
}

func TestLabelAnchorKeepsLabelsInside(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		want string
	}{
		{float64(width - rightPad), "end"}, // the run's end at the right edge
		{float64(width-rightPad) - 39, "end"},
		{float64(width-rightPad) - 41, "middle"},
		{500, "middle"},
		{float64(labelWidth) + 41, "middle"},
		{float64(labelWidth) + 39, "start"},
		{float64(labelWidth), "start"}, // a run that ended at the first entry
	} {
		if got := labelAnchor(tc.x); got != tc.want {
			t.Errorf("labelAnchor(%v) = %q, want %q", tc.x, got, tc.want)
		}
	}
}
