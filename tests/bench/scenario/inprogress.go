package scenario

import (
	"fmt"
	"os"
	"time"

	"github.com/openfuyao/npu-stack/tests/bench/inflight"
	"github.com/openfuyao/npu-stack/tests/bench/report"
)

// concurrency is what the report keeps of a side's nodes in progress:
// the most at once, when (from the clock's start), the time over the
// effective parallelism and the mean cycle. The whole curve goes to
// curvePath (seconds from the clock's start, nodes in progress), next to
// the side's log.
func concurrency(ivs []inflight.Interval, eff int, start time.Time, curvePath string) (*report.Concurrency, error) {
	s := inflight.Summarize(ivs, eff)
	out := &report.Concurrency{Max: s.Max, OverParallelism: report.S(s.Over), Nodes: s.Nodes, MeanCycle: report.S(s.Mean)}
	if s.Max > 0 {
		out.MaxAt = report.S(s.MaxAt.Sub(start))
	}
	f, err := os.Create(curvePath)
	if err != nil {
		return nil, fmt.Errorf("nodes in progress: %w", err)
	}
	if err := inflight.WriteCurve(f, inflight.Curve(ivs), start); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%s: %w", curvePath, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("nodes in progress: %w", err)
	}
	return out, nil
}
