package uninstall

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// hookComponents are the chart's Jobs npu-hooks uninstall deletes: the
// rollout (hook Job or job-mode Job), the resume CronJob's Jobs and the
// preflight hook. Helm deletes no hook at uninstall, so those it kept
// (before-hook-creation only) would stay for ever.
func hookComponents() []string {
	return []string{componentPreflight, componentRollout, componentResume}
}

// propagation deletes with policy: background deletes dependents (a Job's
// pods) after their owner; foreground keeps a DaemonSet, marked deleted,
// until its pods are gone, so its driver pods read the request on it
// while they stop.
func propagation(policy metav1.DeletionPropagation) metav1.DeleteOptions {
	return metav1.DeleteOptions{PropagationPolicy: ptr.To(policy)}
}

// stopRollout deletes the resume CronJob first (it would start a new
// rollout), then every rollout and preflight Job and their pods, waits
// for the pods to be gone (a rollout stops on SIGTERM and releases its
// Lease), then deletes the Lease.
func (u *run) stopRollout(ctx context.Context) error {
	ns := u.cfg.Namespace
	batch := u.cfg.Client.BatchV1()
	crons, err := batch.CronJobs(ns).List(ctx, metav1.ListOptions{LabelSelector: u.selector(selection.Equals, componentResume)})
	if err != nil {
		return fmt.Errorf("list the resume CronJob of release %s in %s: %w", u.cfg.Release, ns, err)
	}
	for _, c := range crons.Items {
		if err := u.act(ctx, "delete", "deleted", u.ref("CronJob", c.Name), func(ctx context.Context) error {
			return ignoreNotFound(batch.CronJobs(ns).Delete(ctx, c.Name, propagation(metav1.DeletePropagationBackground)), "delete CronJob "+ns+"/"+c.Name)
		}); err != nil {
			return err
		}
	}
	hooks := u.selector(selection.In, hookComponents()...)
	jobs, err := batch.Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: hooks})
	if err != nil {
		return fmt.Errorf("list the rollout and preflight Jobs of release %s in %s: %w", u.cfg.Release, ns, err)
	}
	for _, j := range jobs.Items {
		if err := u.act(ctx, "delete", "deleted", u.ref("Job", j.Name), func(ctx context.Context) error {
			return ignoreNotFound(batch.Jobs(ns).Delete(ctx, j.Name, propagation(metav1.DeletePropagationBackground)), "delete Job "+ns+"/"+j.Name)
		}); err != nil {
			return err
		}
	}
	// Their pods directly too: the garbage collector would get to them,
	// but a pod orphaned by an earlier deletion would not be.
	pods, err := u.cfg.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: hooks})
	if err != nil {
		return fmt.Errorf("list the rollout and preflight pods of release %s in %s: %w", u.cfg.Release, ns, err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		if err := u.act(ctx, "delete", "deleted", u.ref("Pod", p.Name)+" ("+p.Labels[labelComponent]+", "+string(p.Status.Phase)+")", func(ctx context.Context) error {
			return ignoreNotFound(u.cfg.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}), "delete pod "+ns+"/"+p.Name)
		}); err != nil {
			return err
		}
	}
	if !u.cfg.DryRun {
		if _, err := u.waitPods(ctx, "the rollout's and preflight's pods", hooks, pods.Items, nil); err != nil {
			return err
		}
	}
	return u.deleteRolloutLease(ctx)
}

// deleteRolloutLease deletes the rollout's Lease unless a rollout outside
// the release (npu-hooks rollout run by hand) still renews it: that one
// would go on cordoning nodes while they are cleaned up. A holder that
// stopped renewing (killed) is waited for one lease duration at most.
func (u *run) deleteRolloutLease(ctx context.Context) error {
	ns, name := u.cfg.Namespace, u.cfg.LeaseName
	leases := u.cfg.Client.CoordinationV1().Leases(ns)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get the rollout's Lease %s/%s: %w", ns, name, err)
	}
	if holder := ptr.Deref(l.Spec.HolderIdentity, ""); holder != "" && !u.cfg.DryRun {
		d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 15)) * time.Second
		renewed, err := u.renewedWithin(ctx, l.ResourceVersion, d+2*time.Second)
		if err != nil {
			return err
		}
		if renewed {
			return fmt.Errorf("the rollout's Lease %s/%s is still renewed by %q, which is no rollout Job of release %s (an npu-hooks rollout run by hand?): stop that rollout, then run npu-hooks uninstall again",
				ns, name, holder, u.cfg.Release)
		}
	}
	return u.act(ctx, "delete", "deleted", u.ref("Lease", name), func(ctx context.Context) error {
		return ignoreNotFound(leases.Delete(ctx, name, metav1.DeleteOptions{}), "delete Lease "+ns+"/"+name)
	})
}

// renewedWithin watches the rollout's Lease for d and reports whether a
// holder renewed it (a new renew time with a holder set).
func (u *run) renewedWithin(ctx context.Context, rv string, d time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	w, err := u.cfg.Client.CoordinationV1().Leases(u.cfg.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", u.cfg.LeaseName).String(), ResourceVersion: rv,
	})
	if err != nil {
		return false, fmt.Errorf("watch the rollout's Lease %s/%s: %w", u.cfg.Namespace, u.cfg.LeaseName, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			if ev.Type == watch.Deleted {
				return false, nil
			}
			if l, isLease := leaseOf(ev.Object); isLease && ptr.Deref(l.Spec.HolderIdentity, "") != "" {
				return true, nil
			}
		}
	}
}

// podsLW lists and watches the release's pods matching selector (as a
// watch-list stream where the client supports one).
func (u *run) podsLW(selector string) cache.ListerWatcher {
	pods := u.cfg.Client.CoreV1().Pods(u.cfg.Namespace)
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return pods.Watch(ctx, o)
		},
	}, u.cfg.Client)
}

func ignoreNotFound(err error, what string) error {
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

func leaseOf(o runtime.Object) (*coordinationv1.Lease, bool) {
	l, ok := o.(*coordinationv1.Lease)
	return l, ok
}
