package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaseConfig makes the rollout single-writer.
type LeaseConfig struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	// Identity should be stable across restarts of the same process slot
	// (the pod name): a restarted holder takes its lease back at once,
	// while anyone else waits for it to expire.
	Identity string
	Duration time.Duration
	// Wait for a lease held by another rollout; false returns ErrLeaseHeld.
	Wait bool
	Log  logrus.FieldLogger
}

// ErrLeaseHeld: another rollout holds the lease and Wait is false.
var ErrLeaseHeld = errors.New("another rollout holds the lease")

// ErrLeaseLost: the lease was lost while running (API server unreachable
// for longer than the renew deadline); the next run resumes.
var ErrLeaseLost = errors.New("lost the rollout lease")

// WithLease runs fn while holding the lease and releases it after.
func WithLease(ctx context.Context, lc LeaseConfig, fn func(ctx context.Context) error) error {
	if lc.Duration <= 0 {
		lc.Duration = 15 * time.Second
	}
	if !lc.Wait {
		if holder, ok, err := heldByOther(ctx, lc); err != nil {
			return err
		} else if ok {
			return fmt.Errorf("lease %s/%s is held by %q (wait for that rollout to finish, or delete the lease if it is gone): %w",
				lc.Namespace, lc.Name, holder, ErrLeaseHeld)
		}
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: lc.Namespace, Name: lc.Name},
		Client:     lc.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: lc.Identity},
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var result error
	ran, lost := false, false
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   lc.Duration,
		RenewDeadline:   lc.Duration * 2 / 3,
		RetryPeriod:     lc.Duration / 5,
		ReleaseOnCancel: true,
		Name:            lc.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				ran = true
				result = fn(ctx)
				cancel()
			},
			OnStoppedLeading: func() {
				if !ran || result == nil && runCtx.Err() == nil {
					lost = true
				}
				cancel()
			},
			OnNewLeader: func(id string) {
				if id != lc.Identity {
					lc.Log.WithField("holder", id).Infof("another rollout holds lease %s/%s; waiting for it", lc.Namespace, lc.Name)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("rollout lease: %w", err)
	}
	le.Run(runCtx)
	switch {
	case ran && lost && result == nil:
		return ErrLeaseLost
	case ran:
		return result
	case ctx.Err() != nil:
		return fmt.Errorf("waiting for lease %s/%s: %w", lc.Namespace, lc.Name, ctx.Err())
	}
	return ErrLeaseLost
}

func heldByOther(ctx context.Context, lc LeaseConfig) (string, bool, error) {
	l, err := lc.Client.CoordinationV1().Leases(lc.Namespace).Get(ctx, lc.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read lease %s/%s: %w", lc.Namespace, lc.Name, err)
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder == "" || holder == lc.Identity || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return holder, false, nil
	}
	expires := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	return holder, time.Now().Before(expires), nil
}
