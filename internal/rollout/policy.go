// Package rollout moves NPU nodes to a new driver version through the
// state machine of docs/driver-upgrade.md. Decide is the pure part (cluster snapshot
// + policy → actions); Controller feeds it from informers and applies its
// actions through client-go.
package rollout

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/openfuyao/npu-stack/internal/window"
)

// Policy is driver.upgradePolicy of the chart, parsed.
type Policy struct {
	// AutoUpgrade only changes what status/plan say: approval of upgrade
	// reboots is the rebooter's business.
	AutoUpgrade bool
	Paused      bool
	// MaxParallel bounds nodes in flight; 0 = unlimited.
	MaxParallel int
	// MaxUnavailable bounds NPU nodes that are cordoned, NotReady or in
	// flight, all counted together (an int or a percentage, rounded up).
	MaxUnavailable intstr.IntOrString
	// MaxFailures stops starting nodes once this many have failed; 0 = no
	// limit.
	MaxFailures int
	// Canary nodes are upgraded first; the rest start only once every
	// canary is up to date.
	Canary labels.Selector

	WaitForCompletion WaitPolicy
	PodDeletion       EvictPolicy
	Drain             DrainPolicy
	// RebootTimeout bounds both the reboot (counted from when the rebooter
	// issued it, not from the wait for approval) and the validation after.
	RebootTimeout time.Duration

	// Windows are the maintenance windows in which nodes are admitted
	// (cordoned) and, by their InFlight, rebooted; none: any time.
	// Judged by the rollout alone, on its own clock (window.go).
	Windows window.Schedule
	// Settle is the pause between a node's return from its upgrade and
	// the next admission; 0: none.
	Settle time.Duration
}

// WaitPolicy: before evicting, wait for pods matching Selector on the node
// to finish (Timeout 0 = forever, then proceed).
type WaitPolicy struct {
	Selector labels.Selector // nil = do not wait
	Timeout  time.Duration
}

// EvictPolicy is how NPU pods are removed.
type EvictPolicy struct {
	Force          bool
	Timeout        time.Duration
	DeleteEmptyDir bool
}

// DrainPolicy is the optional full drain after the NPU pods are gone.
type DrainPolicy struct {
	Enable bool
	EvictPolicy
	Selector string
}

// ResolveMaxUnavailable turns the policy value into a node count out of
// total, rounding percentages up as docs/driver-upgrade.md says.
func ResolveMaxUnavailable(v intstr.IntOrString, total int) (int, error) {
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, total, true)
	if err != nil {
		return 0, fmt.Errorf("maxUnavailable %q: %w (use an integer or a percentage like 25%%)", v.String(), err)
	}
	if n < 0 {
		return 0, fmt.Errorf("maxUnavailable %q is negative", v.String())
	}
	return int(math.Min(float64(n), float64(total))), nil
}
