package fleet

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
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

// HeartbeatConfig renews the Leases of a set of nodes.
type HeartbeatConfig struct {
	Client kubernetes.Interface
	// Every is the renewal period of each node (at least renewTick).
	Every time.Duration
	Clock clock.WithTicker
	// Nodes lists the nodes to renew now (a lister's view: a node added
	// later is renewed from its bucket's next turn).
	Nodes func() []*corev1.Node
	// Write is what one beat writes for a node; nil renews the node's
	// Lease in kube-node-lease. The watch-cost benchmark also plays the
	// kubelet's periodic node status report with it.
	Write func(ctx context.Context, n *corev1.Node) error
	Log   logrus.FieldLogger
}

// Heartbeat renews node Leases as kubelets do; the fleet simulator runs
// one for its NPU nodes, and a fleet of other nodes (the peer's, apart
// from npu-stack's) runs its own.
type Heartbeat struct {
	cfg  HeartbeatConfig
	lag  atomic.Int64 // nanoseconds
	errs atomic.Int64
}

// NewHeartbeat returns a Heartbeat; Run starts it.
func NewHeartbeat(cfg HeartbeatConfig) *Heartbeat {
	cfg.Every = max(cfg.Every, renewTick)
	return &Heartbeat{cfg: cfg}
}

// MaxLag is the latest a bucket of Leases was renewed so far.
func (h *Heartbeat) MaxLag() time.Duration { return time.Duration(h.lag.Load()) }

// Errors are the renewals that failed so far.
func (h *Heartbeat) Errors() int64 { return h.errs.Load() }

// Run renews each node's Lease once per Every until ctx ends, spread
// over the period by a hash of the node name so that the writes are even.
// A slow API server delays a bucket but never skips it (a ticker drops
// the ticks its reader misses): every bucket due by now is renewed, all
// of them in one batch. Renewing them one after the other, a bucket of a
// few nodes per round trip, falls behind for good once the round trip
// grows past the tick under load.
func (h *Heartbeat) Run(ctx context.Context) {
	buckets := int(h.cfg.Every / renewTick)
	t := h.cfg.Clock.NewTicker(renewTick)
	defer t.Stop()
	start := h.cfg.Clock.Now()
	// The bucket of each node, computed once; a node keeps its bucket, so
	// two renewals are a period apart, and a new node is picked up at its
	// bucket's next turn.
	bucketOf := map[string]int{}
	for done := 0; ; {
		if target := int(h.cfg.Clock.Since(start)/renewTick) + 1; done < target {
			h.renewAll(ctx, dueNodes(h.cfg.Nodes(), bucketOf, buckets, done, target))
			// How late the batch's oldest bucket was renewed: the figure to
			// compare with the grace period when the node lifecycle
			// controller marks pods NotReady.
			lag := h.cfg.Clock.Since(start) - time.Duration(done+1)*renewTick
			for {
				old := h.lag.Load()
				if int64(lag) <= old || h.lag.CompareAndSwap(old, int64(lag)) {
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
func (h *Heartbeat) renewAll(ctx context.Context, nodes []*corev1.Node) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, renewParallel)
	for _, n := range nodes {
		sem <- struct{}{}
		wg.Add(1)
		go func(n *corev1.Node) {
			defer wg.Done()
			defer func() { <-sem }()
			write := h.renew
			if h.cfg.Write != nil {
				write = h.cfg.Write
			}
			if err := write(ctx, n); err != nil && ctx.Err() == nil {
				h.errs.Add(1)
				h.cfg.Log.WithError(err).Debug("node heartbeat")
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

func (h *Heartbeat) renew(ctx context.Context, n *corev1.Node) error {
	now := metav1.NewMicroTime(h.cfg.Clock.Now())
	body := fmt.Sprintf(`{"spec":{"renewTime":%q}}`, now.UTC().Format(metav1.RFC3339Micro))
	leases := h.cfg.Client.CoordinationV1().Leases(leaseNamespace)
	_, err := leases.Patch(ctx, n.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	_, err = leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: leaseNamespace, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID,
		}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.Name), LeaseDurationSeconds: ptr.To(int32(2 * h.cfg.Every / time.Second)), RenewTime: &now},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the heartbeat lease of node %s: %w", n.Name, err)
	}
	return nil
}
