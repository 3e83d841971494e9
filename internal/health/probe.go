// Package health is the chip health-watch of DESIGN.md §6: it probes the
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
}

// Evaluate judges the output of `npu-smi info`: it must exit zero, parse,
// show at least expected chips (0: no count check) and no chip that cannot
// compute.
func Evaluate(out []byte, runErr error, expected int) Result {
	if runErr != nil {
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

// Prober runs one probe against the host.
type Prober struct {
	Host    host.Host
	Clock   clock.WithDelayedExecution
	Timeout time.Duration
}

// Probe runs `npu-smi info` and evaluates it. A hang is a failure: the
// command is cancelled after Timeout, measured on Clock so tests need not
// wait for it.
func (p Prober) Probe(ctx context.Context, expected int) Result {
	start := p.Clock.Now()
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := p.Clock.AfterFunc(p.Timeout, func() { cancel(errProbeTimeout) })
	defer t.Stop()
	out, err := p.Host.NPUSMI(pctx, "info")
	if errors.Is(context.Cause(pctx), errProbeTimeout) {
		err = fmt.Errorf("npu-smi info hung: no answer within %s", p.Timeout)
	}
	r := Evaluate(out, err, expected)
	r.Duration = p.Clock.Since(start)
	return r
}
