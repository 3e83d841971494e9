package timeline

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strings"
	"time"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/rolloutrecord"
)

// Geometry of the picture, in SVG user units.
const (
	width      = 1000
	labelWidth = 150
	rightPad   = 24
	titleY     = 22
	legendY    = 42
	rowsTop    = 76
	rowHeight  = 24
	bandHeight = 14
	axisPad    = 34
)

// StateColor is the band colour of each upgrade state: blues for the
// steps before the reboot, orange for the reboot, greens after, red for
// failure.
func StateColor(state string) string {
	switch contract.UpgradeState(state) {
	case contract.StateUpgradeRequired:
		return "#c6dbef"
	case contract.StateCordonRequired:
		return "#9ecae1"
	case contract.StateWaitForJobsRequired:
		return "#6baed6"
	case contract.StatePodDeletionRequired:
		return "#4292c6"
	case contract.StateDrainRequired:
		return "#2171b5"
	case contract.StateRebootRequired:
		return "#f28e2b"
	case contract.StateValidationRequired:
		return "#edc948"
	case contract.StateUncordonRequired:
		return "#8cd17d"
	case contract.StateFailed:
		return "#e15759"
	}
	return "#bab0ac"
}

// Render draws c as a standalone SVG document.
func Render(c Chart) []byte {
	var b bytes.Buffer
	rows := len(c.Rows)
	if rows == 0 {
		rows = 1
	}
	height := rowsTop + rows*rowHeight + axisPad + 20
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	text(&b, 10, titleY, "start", "14", "bold", c.Title)
	if len(c.Rows) == 0 {
		text(&b, 10, rowsTop, "start", "12", "normal", "no node changed state in this rollout")
		b.WriteString("</svg>\n")
		return b.Bytes()
	}
	sub := fmt.Sprintf("from %s UTC, %s", c.Start.UTC().Format("2006-01-02 15:04:05"), fmtDuration(c.End.Sub(c.Start)))
	if c.Dropped > 0 {
		sub += fmt.Sprintf("; %d oldest entries dropped by the record's cap", c.Dropped)
	}
	text(&b, width-rightPad, titleY, "end", "11", "normal", sub)
	legend(&b)
	x := scale(c)
	axisY := rowsTop + len(c.Rows)*rowHeight
	ticks(&b, c, x, axisY)
	for i, r := range c.Rows {
		y := rowsTop + i*rowHeight
		if i%2 == 1 {
			fmt.Fprintf(&b, `<rect x="0" y="%d" width="%d" height="%d" fill="#f5f5f5"/>`+"\n", y, width, rowHeight)
		}
		text(&b, labelWidth-8, y+rowHeight/2+4, "end", "12", "normal", r.Node)
		by := y + (rowHeight-bandHeight)/2
		for _, band := range r.Bands {
			x0, x1 := x(band.From), x(band.To)
			if x1-x0 < 1 {
				x1 = x0 + 1
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %s for %s</title></rect>`+"\n",
				x0, by, x1-x0, bandHeight, StateColor(band.State), esc(r.Node), esc(band.State), fmtDuration(band.To.Sub(band.From)))
		}
		marks(&b, r, x, y)
	}
	for _, o := range c.Outcomes {
		ox := x(o.At)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#555555" stroke-dasharray="4 3"/>`+"\n", ox, rowsTop-4, ox, axisY)
		text(&b, ox, rowsTop-8, labelAnchor(ox), "10", "bold", "run "+o.Outcome)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// labelAnchor anchors a label centred on x, or by its end (start) when
// x is near the right (left) edge of the plot, so that it is not cut off:
// a run's end is most often the right edge.
func labelAnchor(x float64) string {
	const half = 40 // about half the widest label, "run deadline", at 10 px
	switch {
	case x > float64(width-rightPad)-half:
		return "end"
	case x < float64(labelWidth)+half:
		return "start"
	}
	return "middle"
}

// marks draws a row's approvals (green triangles) and reboots (a black
// line from the reboot's start, hollow circle, to the new boot, filled).
func marks(b *bytes.Buffer, r Row, x func(time.Time) float64, y int) {
	mid := y + rowHeight/2
	var started *Mark
	for i := range r.Marks {
		m := r.Marks[i]
		mx := x(m.At)
		switch m.Kind {
		case rolloutrecord.KindApproved:
			fmt.Fprintf(b, `<path d="M %.1f %d l -5 -8 h 10 z" fill="#2ca02c" stroke="#1b5e20"><title>%s: reboot approved</title></path>`+"\n", mx, mid-2, esc(r.Node))
		case rolloutrecord.KindRebooting:
			started = &r.Marks[i]
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%d" r="4" fill="#ffffff" stroke="#000000" stroke-width="1.5"><title>%s: reboot (%s) started</title></circle>`+"\n", mx, mid, esc(r.Node), esc(m.Note))
		case rolloutrecord.KindBooted:
			if started != nil {
				fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000000" stroke-width="2"/>`+"\n", x(started.At)+4, mid, mx-4, mid)
				started = nil
			}
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%d" r="4" fill="#000000"><title>%s: new boot</title></circle>`+"\n", mx, mid, esc(r.Node))
		}
	}
}

// legend draws the state colours and the marks.
func legend(b *bytes.Buffer) {
	lx := 10
	for _, s := range contract.States {
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="10" fill="%s"/>`+"\n", lx, legendY-9, StateColor(string(s)))
		label := strings.TrimSuffix(string(s), "-required")
		text(b, float64(lx+15), legendY, "start", "10", "normal", label)
		lx += 15 + 6*len(label) + 12
	}
	fmt.Fprintf(b, `<path d="M %d %d l -5 -8 h 10 z" fill="#2ca02c" stroke="#1b5e20"/>`+"\n", lx+5, legendY)
	text(b, float64(lx+14), legendY, "start", "10", "normal", "approved")
	lx += 14 + 6*len("approved") + 12
	fmt.Fprintf(b, `<circle cx="%d" cy="%d" r="4" fill="#ffffff" stroke="#000000" stroke-width="1.5"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000" stroke-width="2"/><circle cx="%d" cy="%d" r="4" fill="#000000"/>`+"\n",
		lx+4, legendY-4, lx+8, legendY-4, lx+22, legendY-4, lx+26, legendY-4)
	text(b, float64(lx+34), legendY, "start", "10", "normal", "reboot")
}

// scale maps a time to its x.
func scale(c Chart) func(time.Time) float64 {
	span := c.End.Sub(c.Start)
	if span <= 0 {
		span = time.Second
	}
	plot := float64(width - labelWidth - rightPad)
	return func(t time.Time) float64 {
		return float64(labelWidth) + plot*float64(t.Sub(c.Start))/float64(span)
	}
}

// tickSteps are the spacings the time axis may use.
func tickSteps() []time.Duration {
	return []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour}
}

// TickStep is the smallest spacing giving at most 10 ticks over span.
func TickStep(span time.Duration) time.Duration {
	steps := tickSteps()
	for _, s := range steps {
		if span/s <= 10 {
			return s
		}
	}
	day := steps[len(steps)-1]
	return day * ((span + 10*day - 1) / (10 * day))
}

func ticks(b *bytes.Buffer, c Chart, x func(time.Time) float64, axisY int) {
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`+"\n", labelWidth, axisY, width-rightPad, axisY)
	span := c.End.Sub(c.Start)
	step := TickStep(span)
	for off := time.Duration(0); off <= span; off += step {
		tx := x(c.Start.Add(off))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#dddddd"/>`+"\n", tx, rowsTop, tx, axisY)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000000"/>`+"\n", tx, axisY, tx, axisY+4)
		text(b, tx, axisY+16, "middle", "10", "normal", "+"+fmtDuration(off))
	}
}

// fmtDuration prints d in whole seconds without zero units: 1m, 1m30s, 2h5m.
func fmtDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d == 0 {
		return "0s"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func text(b *bytes.Buffer, x float64, y int, anchor, size, weight, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="%s" font-size="%s" font-weight="%s">%s</text>`+"\n", x, y, anchor, size, weight, esc(s))
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
