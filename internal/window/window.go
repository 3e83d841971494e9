// Package window is the maintenance window: the days and hours, in a
// named time zone, in which a disruptive step (cordoning a node for its
// driver upgrade, rebooting it for a recovery) may start. A Schedule of
// no windows is open at any time, which is what npu-stack did before
// windows existed.
//
// A window belongs to the day it starts on: "sat 22:00-04:00" opens on
// Saturday at 22:00 and closes on Sunday at 04:00. This differs from
// kured, which checks the day of the moment being judged, so that its
// "mon-fri 21:00-05:00" is open on Monday 00:00-05:00 and not on Saturday
// 00:00-05:00 (kubereboot/kured pkg/timewindow/timewindow.go, Contains;
// the wrap was added in kured#206 for kured#204). Saying "Saturday night"
// and getting the Saturday-into-Sunday night is what an operator means.
//
// Times are wall-clock times in the window's zone. A boundary is the
// first instant at which the zone's clock shows that time of day or
// later: on a spring-forward day a boundary inside the skipped hour is
// the moment of the jump, and on a fall-back day a boundary inside the
// repeated hour is its first pass. A window entirely inside a skipped
// hour does not open that day.
//
// Every judgement takes the time explicitly: there is no clock in here.
package window

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// InFlight says what happens to a node already past its cordon when the
// window closes.
type InFlight string

const (
	// Finish: the node goes on to its reboot and back, late if need be.
	Finish InFlight = "finish"
	// Wait: the node goes on up to its reboot, which then waits, the node
	// cordoned and drained, for the next opening.
	Wait InFlight = "wait"
)

// Window is one weekly maintenance window.
type Window struct {
	// Days are the weekdays the window opens on (index time.Weekday).
	Days [7]bool
	// Start and End are seconds after midnight on the window's clock;
	// End may be 86400 (24:00). End at or before Start crosses midnight:
	// the window closes on the next day.
	Start, End int
	Zone       *time.Location
	InFlight   InFlight
}

// Schedule is a set of windows: open when any of them is. Empty means
// always open.
type Schedule []Window

// Always reports whether s puts no limit on time.
func (s Schedule) Always() bool { return len(s) == 0 }

// dayNames are the day names windows are written with, by time.Weekday.
func dayNames() [7]string {
	return [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}
}

// Parse reads a window written as the chart passes it to the binaries:
//
//	<days> <start>-<end> <time zone> [finish|wait]
//
// for example "sat,sun 22:00-04:00 Europe/Berlin wait". Days are mon, tue,
// wed, thu, fri, sat, sun, comma-separated; times are HH:MM or HH:MM:SS
// (end may be 24:00); the zone is an IANA name. In-flight defaults to
// finish. Errors name the part that is wrong and what would be right.
func Parse(spec string) (Window, error) {
	f := strings.Fields(spec)
	if len(f) < 3 || len(f) > 4 {
		return Window{}, fmt.Errorf("maintenance window %q: want \"<days> <start>-<end> <time zone> [finish|wait]\", such as \"sat,sun 22:00-04:00 Europe/Berlin wait\"", spec)
	}
	var w Window
	var err error
	if w.Days, err = parseDays(f[0]); err != nil {
		return Window{}, fmt.Errorf("maintenance window %q: days: %w", spec, err)
	}
	start, end, ok := strings.Cut(f[1], "-")
	if !ok {
		return Window{}, fmt.Errorf("maintenance window %q: hours %q: want <start>-<end>, such as 22:00-04:00", spec, f[1])
	}
	if w.Start, err = parseClock(start, false); err != nil {
		return Window{}, fmt.Errorf("maintenance window %q: start: %w", spec, err)
	}
	if w.End, err = parseClock(end, true); err != nil {
		return Window{}, fmt.Errorf("maintenance window %q: end: %w", spec, err)
	}
	if w.Start == w.End {
		return Window{}, fmt.Errorf("maintenance window %q: start and end are both %s: a window needs a length; a whole day is 00:00-24:00", spec, start)
	}
	if w.Zone, err = LoadZone(f[2]); err != nil {
		return Window{}, fmt.Errorf("maintenance window %q: %w", spec, err)
	}
	w.InFlight = Finish
	if len(f) == 4 {
		switch InFlight(f[3]) {
		case Finish, Wait:
			w.InFlight = InFlight(f[3])
		default:
			return Window{}, fmt.Errorf("maintenance window %q: in-flight %q: want finish or wait", spec, f[3])
		}
	}
	return w, nil
}

// ParseAll parses every spec; nil for none (always open).
func ParseAll(specs []string) (Schedule, error) {
	var s Schedule
	var errs []error
	for _, spec := range specs {
		w, err := Parse(spec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s = append(s, w)
	}
	return s, errors.Join(errs...)
}

// LoadZone loads an IANA time zone by name. "Local" and "" are refused:
// they mean whatever zone the machine judging the window is set to, and
// the rollout and the rebooters run on different machines.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "Local" {
		return nil, fmt.Errorf("time zone %q: name the zone, such as Europe/Berlin, Asia/Shanghai or UTC, not the machine's local zone", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("time zone %q is not an IANA time zone name (such as Europe/Berlin, Asia/Shanghai or UTC): %w", name, err)
	}
	return loc, nil
}

func parseDays(s string) ([7]bool, error) {
	var days [7]bool
	names := dayNames()
	for _, d := range strings.Split(s, ",") {
		found := false
		for i, n := range names {
			if strings.EqualFold(d, n) {
				days[i], found = true, true
			}
		}
		if !found {
			return days, fmt.Errorf("unknown day %q: use mon, tue, wed, thu, fri, sat, sun", d)
		}
	}
	return days, nil
}

// parseClock reads HH:MM or HH:MM:SS as seconds after midnight; 24:00 is
// allowed only as an end.
func parseClock(s string, end bool) (int, error) {
	parts := strings.Split(s, ":")
	bad := fmt.Errorf("%q is not a time of day: want HH:MM or HH:MM:SS, 24-hour, such as 22:00", s)
	if len(parts) < 2 || len(parts) > 3 {
		return 0, bad
	}
	var v [3]int
	limits := [3]int{23, 59, 59}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || len(p) != 2 || n < 0 {
			return 0, bad
		}
		if n > limits[i] && (i != 0 || n != 24) {
			return 0, bad
		}
		v[i] = n
	}
	secs := v[0]*3600 + v[1]*60 + v[2]
	if v[0] == 24 && (!end || secs != 24*3600) {
		if end {
			return 0, fmt.Errorf("%q: the day ends at 24:00; later times are on the next day", s)
		}
		return 0, fmt.Errorf("%q: a window starts at 23:59:59 at the latest; 24:00 is for ends", s)
	}
	return secs, nil
}

// String writes w as Parse reads it.
func (w Window) String() string {
	var days []string
	names := dayNames()
	// Monday first, as the week is written in the values.
	for _, d := range []time.Weekday{time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday, time.Sunday} {
		if w.Days[d] {
			days = append(days, names[d])
		}
	}
	zone := "UTC"
	if w.Zone != nil {
		zone = w.Zone.String()
	}
	s := fmt.Sprintf("%s %s-%s %s", strings.Join(days, ","), clock(w.Start), clock(w.End), zone)
	if w.InFlight == Wait {
		s += " " + string(Wait)
	}
	return s
}

// Specs writes s as the flags Parse reads.
func (s Schedule) Specs() []string {
	out := make([]string, len(s))
	for i, w := range s {
		out[i] = w.String()
	}
	return out
}

func clock(secs int) string {
	h, m, sec := secs/3600, secs/60%60, secs%60
	if sec != 0 {
		return fmt.Sprintf("%02d:%02d:%02d", h, m, sec)
	}
	return fmt.Sprintf("%02d:%02d", h, m)
}
