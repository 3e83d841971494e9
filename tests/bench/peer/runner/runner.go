// Package runner drives NVIDIA's driver upgrade state machine
// (github.com/NVIDIA/k8s-operator-libs pkg/upgrade) the way GPU Operator's
// upgrade controller drives it, for the benchmark to compare npu-stack's
// rollout with: a controller-runtime manager with leader election, one
// reconcile at a time of a single request, enqueued by Node changes of the
// library's upgrade-state or skip label and by driver DaemonSet generation
// changes, each reconcile building the cluster state and applying it with
// the policy, then requeued after two minutes (times the fleet's time
// scale, as every other timer of the controller).
package runner

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/NVIDIA/k8s-operator-libs/pkg/upgrade"
)

// GPU Operator's controller settings, unscaled (gpu-operator
// controllers/upgrade_controller.go plannedRequeueInterval;
// controllers/clusterpolicy_controller.go minDelayCR and maxDelayCR, the
// upgrade controller's rate limiter).
const (
	// PlannedRequeue is the reconcile's result: "node/ds/clusterpolicy
	// updates from outside of the upgrade flow are not guaranteed", so it
	// reconciles again this long after each reconcile.
	PlannedRequeue = 2 * time.Minute
	// minDelay and maxDelay bound the retries after a failed reconcile.
	minDelay = 100 * time.Millisecond
	maxDelay = 3 * time.Second
	// singleton is the one request every watch enqueues.
	singleton = "driver-upgrade"
)

// Config is one peer run.
type Config struct {
	// Namespace holds the driver DaemonSets, the operator's Lease and its
	// cache (GPU Operator's OPERATOR_NAMESPACE).
	Namespace string
	// DriverLabels select the driver DaemonSets and pods.
	DriverLabels map[string]string
	// ValidatorSelector selects the validator pods.
	ValidatorSelector string
	DriverName        string
	// MaxParallelUpgrades and MaxUnavailable are the scenario's; the
	// rest of the policy is GPU Operator's default.
	MaxParallelUpgrades int
	MaxUnavailable      string
	// TimeScale is the fleet's time scale (simulated seconds per real
	// second: 1 runs in real time, 1/30 compresses a 10-minute node
	// upgrade into 20 s); every timer of the controller and every timeout
	// of the policy is multiplied by it (see Timers).
	TimeScale float64
	// Trace receives one JSON line per reconcile.
	Trace io.Writer
	Log   logr.Logger
}

// Run starts the manager and blocks until ctx ends.
func Run(ctx context.Context, rc *rest.Config, cfg Config) error {
	timers, err := ScaledTimers(cfg.TimeScale)
	if err != nil {
		return err
	}
	policy, err := Policy(cfg.MaxParallelUpgrades, cfg.MaxUnavailable, timers)
	if err != nil {
		return err
	}
	upgrade.SetDriverName(cfg.DriverName)
	mgr, err := ctrl.NewManager(rc, ctrl.Options{
		Logger: cfg.Log,
		// The operator caches its own namespace (nodes are cluster-wide).
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{cfg.Namespace: {}}},
		// Its deployment runs with --leader-elect: the renewals are part
		// of its API traffic.
		LeaderElection:          true,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: cfg.Namespace,
		// No metrics or probe listener: they serve no API traffic, and
		// several peers may run on one machine.
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	log := cfg.Log.WithName("controllers").WithName("Upgrade")
	//nolint:staticcheck // GPU Operator hands the library this (old events API) recorder.
	sm, err := upgrade.NewClusterUpgradeStateManager(log, mgr.GetConfig(), mgr.GetEventRecorderFor(EventSource), upgrade.StateOptions{})
	if err != nil {
		return fmt.Errorf("upgrade state manager: %w", err)
	}
	sm = sm.WithPodDeletionEnabled(deletionFilter).WithValidationEnabled(cfg.ValidatorSelector).WithRestartOnlyPredicate(restartOnly)
	r := &reconciler{sm: sm, namespace: cfg.Namespace, labels: cfg.DriverLabels, policy: policy, requeue: timers.PlannedRequeue,
		trace: newTracer(cfg.Trace), log: log}
	if err := r.watch(mgr, timers); err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	return nil
}

// watch sets up the controller as GPU Operator's SetupWithManager does
// for the objects this fleet has (no ClusterPolicy or NVIDIADriver
// resources: the policy is fixed for the run).
func (r *reconciler) watch(mgr ctrl.Manager, t Timers) error {
	c, err := controller.New("upgrade-controller", mgr, controller.Options{Reconciler: r, MaxConcurrentReconciles: 1,
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](t.MinRetry, t.MaxRetry)})
	if err != nil {
		return fmt.Errorf("upgrade controller: %w", err)
	}
	nodes := predicate.TypedFuncs[*corev1.Node]{UpdateFunc: func(e event.TypedUpdateEvent[*corev1.Node]) bool {
		key, skip := upgrade.GetUpgradeStateLabelKey(), upgrade.GetUpgradeSkipNodeLabelKey()
		o, n := e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()
		return o[key] != n[key] || o[skip] != n[skip]
	}}
	if err := c.Watch(source.Kind(mgr.GetCache(), &corev1.Node{}, handler.TypedEnqueueRequestsFromMapFunc(toSingleton[*corev1.Node](r)), nodes)); err != nil {
		return fmt.Errorf("watch nodes: %w", err)
	}
	driver := labels.SelectorFromSet(r.labels)
	dsSel := predicate.NewTypedPredicateFuncs(func(ds *appsv1.DaemonSet) bool { return driver.Matches(labels.Set(ds.GetLabels())) })
	if err := c.Watch(source.Kind(mgr.GetCache(), &appsv1.DaemonSet{}, handler.TypedEnqueueRequestsFromMapFunc(toSingleton[*appsv1.DaemonSet](r)),
		predicate.And[*appsv1.DaemonSet](predicate.TypedGenerationChangedPredicate[*appsv1.DaemonSet]{}, dsSel))); err != nil {
		return fmt.Errorf("watch driver DaemonSets: %w", err)
	}
	return nil
}

// toSingleton maps every event to the one request, noting it for the
// trace (a reconcile with no event since the last one is the requeue).
func toSingleton[T client.Object](r *reconciler) handler.TypedMapFunc[T, reconcile.Request] {
	return func(context.Context, T) []reconcile.Request {
		r.trace.event()
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: singleton}}}
	}
}
