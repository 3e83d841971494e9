package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/NVIDIA/k8s-operator-libs/api/upgrade/v1alpha1"
	"github.com/NVIDIA/k8s-operator-libs/pkg/upgrade"
)

type reconciler struct {
	sm        upgrade.ClusterUpgradeStateManager
	namespace string
	labels    map[string]string
	policy    *v1alpha1.DriverUpgradePolicySpec
	requeue   time.Duration
	trace     *tracer
	log       logr.Logger
}

// Reconcile is GPU Operator's ClusterPolicy path: build the state, apply
// it with the policy, requeue after the (scaled) planned requeue; an error
// is retried by the rate limiter instead.
func (r *reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	rec := r.trace.begin()
	states, err := r.reconcile(ctx)
	r.trace.end(rec, states, err)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: r.requeue}, nil
}

func (r *reconciler) reconcile(ctx context.Context) (map[string]int, error) {
	state, err := r.sm.BuildState(ctx, r.namespace, r.labels)
	if err != nil {
		return nil, fmt.Errorf("build the cluster upgrade state: %w", err)
	}
	states := map[string]int{}
	for s, nodes := range state.NodeStates {
		if s == upgrade.UpgradeStateUnknown {
			s = "unknown"
		}
		states[s] = len(nodes)
	}
	// The controller computes maxUnavailable from the managed nodes for its
	// metrics; ApplyState computes it again itself. Kept for the error.
	total := r.sm.GetTotalManagedNodes(state)
	if r.policy.MaxUnavailable != nil {
		if _, err := intstr.GetScaledValueFromIntOrPercent(r.policy.MaxUnavailable, total, true); err != nil {
			return states, fmt.Errorf("maxUnavailable of %d nodes: %w", total, err)
		}
	}
	if err := r.sm.ApplyState(ctx, state, r.policy); err != nil {
		return states, fmt.Errorf("apply the cluster upgrade state: %w", err)
	}
	return states, nil
}

// Record is one reconcile as the trace writes it: when it ran, what
// started it, and the nodes per library state it found.
type Record struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Trigger is "event" (a watched change since the last reconcile
	// began), "requeue" (none: the planned requeue) or "retry" (none, and
	// the last reconcile failed: the rate limiter's retry).
	Trigger string         `json:"trigger"`
	States  map[string]int `json:"states"`
	Error   string         `json:"error,omitempty"`
}

// tracer writes the Records. Events may come from the informers while a
// reconcile runs; they count for the next one.
type tracer struct {
	mu         sync.Mutex
	w          io.Writer
	events     int
	lastFailed bool
}

func newTracer(w io.Writer) *tracer { return &tracer{w: w} }

func (t *tracer) event() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events++
}

func (t *tracer) begin() Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	rec := Record{Start: time.Now(), Trigger: "event"}
	switch {
	case t.events > 0:
	case t.lastFailed:
		rec.Trigger = "retry"
	default:
		rec.Trigger = "requeue"
	}
	t.events = 0
	return rec
}

func (t *tracer) end(rec Record, states map[string]int, err error) {
	rec.End, rec.States = time.Now(), states
	if err != nil {
		rec.Error = err.Error()
	}
	b, merr := json.Marshal(rec)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lastFailed = err != nil
	if t.w == nil || merr != nil {
		return
	}
	// A reader that went away must not stop the controller.
	_, _ = t.w.Write(append(b, '\n'))
}
