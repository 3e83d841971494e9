package scenario

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/openfuyao/npu-stack/tests/bench/report"
)

// runTogether runs npu-stack's upgrade and the peer's at the same time,
// each on its own fleet in the same control plane, with one clock start
// for both: the instant the later of the two is ready to start. The API
// server serves both at once, so its CPU above idle is not split between
// them; only its CPU on each side's own requests is.
func (b *Bed) runTogether(ctx context.Context, spec Spec) (report.Scenario, error) {
	if b.peer == nil || !b.cfg.PeerApart {
		return report.Scenario{}, fmt.Errorf("a scenario run together with the peer needs a bed set up with PeerApart and a PeerBinary")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := newGate(2)
	var (
		wg      sync.WaitGroup
		out     report.Scenario
		peer    *report.Peer
		errN    error
		errPeer error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		out, errN = b.runNPUStack(ctx, spec, func() time.Time { return g.wait(ctx) })
		if errN != nil {
			cancel()
		}
	}()
	go func() {
		defer wg.Done()
		peer, errPeer = b.runPeer(ctx, spec, func() time.Time { return g.wait(ctx) })
		if errPeer != nil {
			cancel()
		}
	}()
	wg.Wait()
	if errPeer != nil {
		errPeer = fmt.Errorf("peer: %w", errPeer)
	}
	if err := errors.Join(errN, errPeer); err != nil {
		return out, fmt.Errorf("%s, both at once: %w", out.Name(), err)
	}
	// One API server served both: what it spent above idle is theirs
	// together, not either's. The CPU on each side's own requests stays:
	// their FlowSchemas tell those apart.
	out.APIServerCPU, peer.APIServerCPU = nil, nil
	out.Together, out.Peer = true, peer
	return out, nil
}

// gate starts several clocks at one instant: each side calls wait once
// it is ready, and every call returns, with the same time, once the last
// has come (or at once with ctx's end, so that a side that failed before
// the gate does not hold the other).
type gate struct {
	mu      sync.Mutex
	need    int
	open    chan struct{}
	started time.Time
}

func newGate(n int) *gate { return &gate{need: n, open: make(chan struct{})} }

func (g *gate) wait(ctx context.Context) time.Time {
	g.mu.Lock()
	g.need--
	if g.need == 0 {
		g.started = time.Now()
		close(g.open)
	}
	g.mu.Unlock()
	select {
	case <-g.open:
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.started
	case <-ctx.Done():
		return time.Now()
	}
}
