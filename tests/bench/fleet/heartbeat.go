package fleet

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The kubelet's heartbeat. The test bed's KWOK writes node status only
// every ten minutes and keeps no node Leases, so after the controller
// manager's grace period (50 s) the node lifecycle controller takes every
// KWOK node for dead and marks its pods NotReady, which would stall any
// rollout longer than that. The simulator renews a Lease per node in
// kube-node-lease, as kubelets do (they renew every 10 s; 20 s is enough
// and costs the API server less).
const (
	leaseNamespace = corev1.NamespaceNodeLease
	leaseDuration  = 40
	renewEvery     = 20 * time.Second
	renewTick      = 100 * time.Millisecond
)

// heartbeats renews each node's Lease once per renewEvery, spread over
// the period by a hash of the node name so that the writes are even.
func (s *Sim) heartbeats(ctx context.Context) {
	buckets := uint32(renewEvery / renewTick)
	t := s.cfg.Clock.NewTicker(renewTick)
	defer t.Stop()
	var due [][]*corev1.Node
	for tick := uint32(0); ; tick++ {
		if tick%buckets == 0 {
			// Re-plan once per period: nodes come and go.
			due = make([][]*corev1.Node, buckets)
			nodes, _ := s.nodes.List(labels.Everything())
			for _, n := range nodes {
				// A node keeps its bucket from period to period, so the
				// gap between two renewals is one period.
				b := bucket(n.Name, buckets)
				due[b] = append(due[b], n)
			}
		}
		for _, n := range due[tick%buckets] {
			if err := s.renew(ctx, n); err != nil && ctx.Err() == nil {
				s.errs.Add(1)
				s.cfg.Log.WithError(err).Debug("node heartbeat")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

func bucket(name string, n uint32) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return h.Sum32() % n
}

func (s *Sim) renew(ctx context.Context, n *corev1.Node) error {
	now := metav1.NewMicroTime(s.cfg.Clock.Now())
	body := fmt.Sprintf(`{"spec":{"renewTime":%q}}`, now.UTC().Format(metav1.RFC3339Micro))
	leases := s.cfg.Client.CoordinationV1().Leases(leaseNamespace)
	_, err := leases.Patch(ctx, n.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	_, err = leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: leaseNamespace, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID,
		}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.Name), LeaseDurationSeconds: ptr.To[int32](leaseDuration), RenewTime: &now},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the heartbeat lease of node %s: %w", n.Name, err)
	}
	return nil
}
