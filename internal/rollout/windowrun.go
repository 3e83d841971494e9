package rollout

// The controller's side of maintenance windows: staying for an opening
// before the run's deadline, and telling the nodes next in line.

import (
	"context"
	"time"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// waitsForWindow is true when the rollout waits for a maintenance window
// that opens before its deadline: it stays, and decides again at the
// opening (Decision.Requeue). One that opens later ends the run
// (WaitingForWindow); the resume CronJob carries on then.
func waitsForWindow(ctx context.Context, d Decision) bool {
	if d.Outcome != WaitingForWindow || d.Window == nil {
		return false
	}
	deadline, ok := ctx.Deadline()
	return !ok || d.Window.Next.Before(deadline)
}

// announce records a MaintenanceWindowClosed event on each node the
// budgets would admit now but for the window, once per node and opening.
func (c *Controller) announce(waits []WindowWait) {
	if c.cfg.Recorder == nil {
		return
	}
	if c.announced == nil {
		c.announced = map[string]time.Time{}
	}
	for _, w := range waits {
		if c.announced[w.Node].Equal(w.Until) {
			continue
		}
		node, err := c.nodes.Get(w.Node)
		if err != nil {
			continue // gone from the cache: nothing to tell
		}
		c.announced[w.Node] = w.Until
		c.cfg.Recorder.Node(node, false, contract.EventMaintenanceWindowClosed, "%s", w.Message)
	}
}
