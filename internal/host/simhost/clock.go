package simhost

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/utils/clock"
)

// The machine's wall clock may be set off from the real time, as a node
// whose NTP is broken is: tests of anything that compares times across
// machines need nodes that disagree. The offset lives in its own file,
// read at every reading of the clock, so the harness can change it while
// the agents run.
const clockOffsetFile = "clock-offset"

// SetClockOffset sets how far the machine's clock is ahead of the real
// time (negative: behind).
func (h *Host) SetClockOffset(d time.Duration) error {
	path := filepath.Join(h.Dir, clockOffsetFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(d.String()), 0o644); err != nil {
		return fmt.Errorf("simulated host %s: set clock offset: %w", h.Dir, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("simulated host %s: set clock offset: %w", h.Dir, err)
	}
	return nil
}

// ClockOffset is how far the machine's clock is ahead of the real time.
func (h *Host) ClockOffset() (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(h.Dir, clockOffsetFile))
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("simulated host %s: read clock offset: %w", h.Dir, err)
	}
	d, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("simulated host %s: clock offset %q: %w", h.Dir, b, err)
	}
	return d, nil
}

// Clock is the machine's wall clock: the real time plus its offset.
// Durations (timers, sleeps) run at the real rate.
func (h *Host) Clock() clock.WithTicker { return offsetClock{WithTicker: clock.RealClock{}, h: h} }

type offsetClock struct {
	clock.WithTicker
	h *Host
}

func (c offsetClock) Now() time.Time {
	d, err := c.h.ClockOffset()
	if err != nil {
		// An unreadable offset file is a broken test harness; the real
		// time keeps the agent going.
		d = 0
	}
	return c.WithTicker.Now().Add(d)
}

func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
