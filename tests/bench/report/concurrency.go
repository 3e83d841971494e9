package report

import "fmt"

// Concurrency is how many nodes a side had in progress at once: nodes
// whose upgrade-state label was in a state the side's maxParallelUpgrades
// counts, as the benchmark's node watch saw the label. The physical limit
// ceil(N/p) × t holds for a side that keeps at most p nodes in progress;
// one that had more can finish under it, and this is where it shows.
type Concurrency struct {
	// Max is the most nodes in progress at once, first reached MaxAt
	// after the clock's start.
	Max   int     `json:"max"`
	MaxAt Seconds `json:"maxAtSeconds"`
	// OverParallelism is the time more nodes than the effective
	// parallelism were in progress.
	OverParallelism Seconds `json:"overParallelismSeconds"`
	// Nodes are the node upgrades seen (admitted and taken out of
	// progress), MeanCycle their mean time in progress.
	Nodes     int     `json:"nodes"`
	MeanCycle Seconds `json:"meanCycleSeconds"`
}

// atOnce is a side's most nodes in progress at once, with the time over
// the parallelism p where there was any ("—": not recorded).
func atOnce(c *Concurrency) string {
	switch {
	case c == nil:
		return "—"
	case c.OverParallelism > 0:
		return fmt.Sprintf("**%d** (%s over p)", c.Max, fmtSec(c.OverParallelism))
	}
	return fmt.Sprintf("%d", c.Max)
}

// overNote explains a side's wall against the limit by its concurrency:
// empty when it kept within the parallelism or was not recorded.
func overNote(c *Concurrency, p int) string {
	if c == nil || c.Max <= p || p <= 0 {
		return ""
	}
	return fmt.Sprintf(", up to %d nodes in progress at once against a parallelism of %d (%s over it), so its limit is not ceil(N/p) × t",
		c.Max, p, fmtSec(c.OverParallelism))
}

// cycleCell is a side's mean time in progress per node ("—": not
// recorded).
func cycleCell(c *Concurrency) string {
	if c == nil || c.Nodes == 0 {
		return "—"
	}
	return fmtSec(c.MeanCycle)
}
