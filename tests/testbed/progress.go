package testbed

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// HeartbeatEvery is how often a running Progress step says it still runs:
// a first `make demo` compiles for minutes, and a build that prints
// nothing for that long looks hung.
const HeartbeatEvery = 30 * time.Second

// Progress tells a person what a long setup (the demo's, make cluster's)
// is doing: each step as "[n/m] what" when it starts, a line at least
// every HeartbeatEvery while it runs, and its time when it ends (as
// ci/progress.sh does for the shell builds). A nil *Progress runs the
// steps and prints nothing: the tests' output is their own.
type Progress struct {
	w     io.Writer
	every time.Duration
	total int

	mu sync.Mutex // guards n and the writes: steps may run at once
	n  int
}

// NewProgress reports steps steps to w, with a heartbeat every every
// (HeartbeatEvery if 0).
func NewProgress(w io.Writer, steps int, every time.Duration) *Progress {
	if every <= 0 {
		every = HeartbeatEvery
	}
	return &Progress{w: w, every: every, total: steps}
}

// Step runs f as the next step, named what. Steps may run at once from
// several goroutines; each is numbered when it starts.
func (p *Progress) Step(what string, f func() error) error {
	if p == nil {
		return f()
	}
	p.mu.Lock()
	p.n++
	tag := fmt.Sprintf("[%d/%d] %s", p.n, p.total, what)
	p.mu.Unlock()
	p.printf("%s\n", tag)
	start := time.Now()
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p.printf("%s: still running, %s\n", tag, Duration(time.Since(start)))
			}
		}
	}()
	err := f()
	close(done)
	<-stopped // no heartbeat after the step's last line
	if err != nil {
		p.printf("%s: FAILED after %s\n", tag, Duration(time.Since(start)))
		return err
	}
	p.printf("%s: done in %s\n", tag, Duration(time.Since(start)))
	return nil
}

func (p *Progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = fmt.Fprintf(p.w, format, args...) // progress only: a lost line costs nothing
}

// Duration is d as a person reads it: "1 min 5 s", "42 s".
func Duration(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	if s >= 60 {
		return fmt.Sprintf("%d min %d s", s/60, s%60)
	}
	return fmt.Sprintf("%d s", s)
}
