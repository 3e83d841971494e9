package fleet

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
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
// kube-node-lease, as kubelets do (they renew every 10 s; by default the
// simulator every 20 s, which is enough for the 50 s grace and costs the
// API server less; Config.HeartbeatEvery for larger fleets, whose control
// plane is then started with a longer grace).
const (
	leaseNamespace = corev1.NamespaceNodeLease
	// DefaultHeartbeatEvery fits the controller manager's default grace
	// period of 50 s.
	DefaultHeartbeatEvery = 20 * time.Second
	renewTick             = 100 * time.Millisecond
	// renewParallel bounds the renewals in flight: under the load of a
	// 5,000-node rollout one takes up to a few hundred milliseconds, and
	// the renewals must keep up with the period or leases expire.
	renewParallel = 32
)

// heartbeats renews each node's Lease once per HeartbeatEvery, spread
// over the period by a hash of the node name so that the writes are even.
// A slow API server delays a bucket but never skips it (a ticker drops
// the ticks its reader misses): every bucket due by now is renewed, all
// of them in one batch. Renewing them one after the other, a bucket of a
// few nodes per round trip, falls behind for good once the round trip
// grows past the tick under load.
func (s *Sim) heartbeats(ctx context.Context) {
	buckets := int(s.cfg.HeartbeatEvery / renewTick)
	t := s.cfg.Clock.NewTicker(renewTick)
	defer t.Stop()
	start := s.cfg.Clock.Now()
	// The bucket of each node, computed once; a node keeps its bucket, so
	// two renewals are a period apart, and a new node is picked up at its
	// bucket's next turn.
	bucketOf := map[string]int{}
	for done := 0; ; {
		if target := int(s.cfg.Clock.Since(start)/renewTick) + 1; done < target {
			nodes, _ := s.nodes.List(labels.Everything())
			s.renewAll(ctx, dueNodes(nodes, bucketOf, buckets, done, target))
			// How late the batch's oldest bucket was renewed: the figure to
			// compare with the grace period when the node lifecycle
			// controller marks pods NotReady.
			lag := s.cfg.Clock.Since(start) - time.Duration(done+1)*renewTick
			for {
				old := s.beatLag.Load()
				if int64(lag) <= old || s.beatLag.CompareAndSwap(old, int64(lag)) {
					break
				}
			}
			done = target
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// dueNodes are the nodes of buckets from to to-1 (counted since the
// start, so modulo buckets): every node once when a whole period or more
// is due. bucketOf caches each node's bucket.
func dueNodes(nodes []*corev1.Node, bucketOf map[string]int, buckets, from, to int) []*corev1.Node {
	if to-from >= buckets {
		return nodes
	}
	var due []*corev1.Node
	for _, n := range nodes {
		b, ok := bucketOf[n.Name]
		if !ok {
			b = int(bucket(n.Name, uint32(buckets)))
			bucketOf[n.Name] = b
		}
		if (b-from%buckets+buckets)%buckets < to-from {
			due = append(due, n)
		}
	}
	return due
}

// renewAll renews the leases of nodes, renewParallel at once.
func (s *Sim) renewAll(ctx context.Context, nodes []*corev1.Node) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, renewParallel)
	for _, n := range nodes {
		sem <- struct{}{}
		wg.Add(1)
		go func(n *corev1.Node) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := s.renew(ctx, n); err != nil && ctx.Err() == nil {
				s.errs.Add(1)
				s.cfg.Log.WithError(err).Debug("node heartbeat")
			}
		}(n)
	}
	wg.Wait()
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
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.Name), LeaseDurationSeconds: ptr.To(int32(2 * s.cfg.HeartbeatEvery / time.Second)), RenewTime: &now},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the heartbeat lease of node %s: %w", n.Name, err)
	}
	return nil
}
