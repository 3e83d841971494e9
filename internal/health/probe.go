// Package health is the chip health-watch (docs/self-healing.md): it probes the
// chips with `npu-smi info`, decides from consecutive results whether the
// node is wedged or recovered (Decide, a pure function), and carries the
// decision out on the Node, the marker directory and as Events (Watcher).
package health

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/npusmi"
)

// Result is one probe of the chips.
type Result struct {
	OK bool
	// Reason says why the probe failed, in words an operator can act on.
	Reason string
	// Info holds the chips when npu-smi printed a readable table (also
	// for a failed probe with a Critical chip).
	Info     npusmi.Info
	Duration time.Duration
	// Problem is set when npu-smi could not run at all (missing, unable
	// to load its libraries, no driver on this boot): the host failing
	// its contract, which says nothing about the chips.
	Problem *host.ProblemError
}

// Evaluate judges the output of `npu-smi info`: it must exit zero, parse,
// show at least expected chips (0: no count check) and no chip that cannot
// compute.
func Evaluate(out []byte, runErr error, expected int) Result {
	if runErr != nil {
		if pe := hostProblem(runErr); pe != nil {
			return Result{Reason: pe.Error(), Problem: pe}
		}
		if ee, ok := host.IsExitError(runErr); ok {
			return Result{Reason: fmt.Sprintf("%s exited with code %d: %s", ee.Command, ee.Code, firstLine(ee.Output))}
		}
		return Result{Reason: runErr.Error()}
	}
	info, err := npusmi.Parse(out)
	if err != nil {
		return Result{Reason: fmt.Sprintf("unreadable npu-smi info output: %v", err)}
	}
	r := Result{Info: info}
	if bad := info.Unhealthy(); len(bad) > 0 {
		var parts []string
		for _, c := range bad {
			parts = append(parts, fmt.Sprintf("NPU %d chip %d %s", c.NPU, c.Chip, c.RawHealth))
		}
		r.Reason = "unhealthy chips: " + strings.Join(parts, ", ")
		return r
	}
	if expected > 0 && len(info.Chips) < expected {
		r.Reason = fmt.Sprintf("npu-smi shows %d chips, want %d (a chip fell off the bus)", len(info.Chips), expected)
		return r
	}
	r.OK = true
	return r
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return "no output"
	}
	return s
}

var errProbeTimeout = errors.New("probe timeout")

// Prober runs one probe against the host. Build it with NewProber so that
// it remembers an npu-smi it had to abandon; a literal Prober judges every
// probe on its own.
type Prober struct {
	Host    host.Host
	Clock   clock.WithDelayedExecution
	Timeout time.Duration

	hung *abandonedSMI
}

// abandonedSMI is an npu-smi left running by a probe that timed out.
type abandonedSMI struct {
	// done is closed when the abandoned call finally returns; nil when
	// none is outstanding. Only the goroutine calling Probe reads or sets
	// the fields.
	done  chan struct{}
	since time.Time
}

// NewProber returns a Prober that starts no new npu-smi while one it
// abandoned still runs.
func NewProber(h host.Host, clk clock.WithDelayedExecution, timeout time.Duration) Prober {
	return Prober{Host: h, Clock: clk, Timeout: timeout, hung: &abandonedSMI{}}
}

type smiAnswer struct {
	out []byte
	err error
}

// Probe runs `npu-smi info` and evaluates it. A hang is a failure: the
// command is cancelled after Timeout, measured on Clock so tests need not
// wait for it, and then abandoned, not waited for. On a wedged device
// npu-smi sits in uninterruptible sleep, where even SIGKILL takes no
// effect, and a descendant holding its output pipe keeps exec's Wait
// blocked likewise: waiting would stop the watch loop, and the wedge would
// never be reported. The abandoned call goes on in the background and
// reaps the process if it ever exits; until then every probe fails at once
// without starting another npu-smi, so hung processes do not pile up on
// the device.
func (p Prober) Probe(ctx context.Context, expected int) Result {
	start := p.Clock.Now()
	if p.hung != nil && p.hung.done != nil {
		select {
		case <-p.hung.done:
			p.hung.done = nil
		default:
			return Result{Reason: fmt.Sprintf("npu-smi info started %s ago is still hung (left to the kernel); no new npu-smi is started until it exits",
				p.Clock.Since(p.hung.since).Round(time.Second))}
		}
	}
	pctx, cancel := context.WithCancelCause(ctx)
	answer := make(chan smiAnswer, 1)
	go func() {
		out, err := p.Host.NPUSMI(pctx, "info")
		answer <- smiAnswer{out, err}
	}()
	t := p.Clock.NewTimer(p.Timeout)
	defer t.Stop()
	var a smiAnswer
	select {
	case a = <-answer:
		cancel(nil)
	case <-t.C():
		// Kill it (exec does on cancel) for the case it can still die,
		// but do not wait for it.
		cancel(errProbeTimeout)
		p.abandon(start, answer)
		r := Result{Reason: fmt.Sprintf("npu-smi info hung: no answer within %s; left to the kernel", p.Timeout)}
		r.Duration = p.Clock.Since(start)
		return r
	case <-ctx.Done():
		// Shutting down: the caller drops the result; do not wait either.
		cancel(nil)
		p.abandon(start, answer)
		return Result{Reason: ctx.Err().Error(), Duration: p.Clock.Since(start)}
	}
	r := Evaluate(a.out, a.err, expected)
	r.Duration = p.Clock.Since(start)
	return r
}

// abandon leaves the npu-smi call answering on answer to the background,
// which reaps it if it ever returns.
func (p Prober) abandon(at time.Time, answer <-chan smiAnswer) {
	done := make(chan struct{})
	if p.hung != nil {
		p.hung.done, p.hung.since = done, at
	}
	go func() {
		<-answer
		close(done)
	}()
}
