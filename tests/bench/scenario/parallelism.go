// Parallelism of a scenario (fixed, a fraction of the fleet or unlimited) and
// the physical limit it sets.

package scenario

import (
	"math"
	"time"
)

// Parallelism is maxParallelUpgrades as a scenario axis.
type Parallelism struct {
	// Label is how the report names it: "1", "10%", "unlimited".
	Label string
	// Fixed nodes, or Fraction of the fleet (rounded up); neither =
	// unlimited.
	Fixed    int
	Fraction float64
}

// Effective is the number of nodes allowed at once out of n.
func (p Parallelism) Effective(n int) int {
	switch {
	case p.Fixed > 0:
		return min(p.Fixed, n)
	case p.Fraction > 0:
		return min(int(math.Ceil(float64(n)*p.Fraction)), n)
	}
	return n
}

// MaxParallelUpgrades is the chart value (0 = unlimited).
func (p Parallelism) MaxParallelUpgrades(n int) int {
	if p.Fixed == 0 && p.Fraction == 0 {
		return 0
	}
	return p.Effective(n)
}

// PhysicalLimit is ceil(n / effective) × perNode.
func PhysicalLimit(n, effective int, perNode time.Duration) time.Duration {
	if effective <= 0 {
		return 0
	}
	waves := (n + effective - 1) / effective
	return time.Duration(waves) * perNode
}
