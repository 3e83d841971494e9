package reboot

// What the agent knows of the fleet: the NPU nodes that ask for a reboot
// (slimmed to the keys storm protection reads), the number of NPU nodes
// when a decision needs it, and the reboot slots' Leases.

import (
	"context"
	"fmt"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// fleetSizeTTL is how long a count of the NPU nodes serves the storm
// protection's percentage: the fleet's size changes slowly, and a wedged
// node's agent then lists the fleet at most once a minute.
const fleetSizeTTL = time.Minute

// fleetSizePage is the page size of that count's LIST.
const fleetSizePage = 500

// slimFleetNode keeps of an NPU node's metadata only what the storm
// protection counts (its name and the reboot-required label and
// reboot-reason annotation): every agent caches every NPU node, and their
// managed fields, labels and annotations would grow each agent's memory
// with the size of the cluster.
func (a *Agent) slimFleetNode(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil // a tombstone: left as it is
	}
	slim := &metav1.PartialObjectMetadata{
		TypeMeta:   m.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion},
	}
	if v, ok := m.Labels[a.keys.RebootRequired()]; ok {
		slim.Labels = map[string]string{a.keys.RebootRequired(): v}
	}
	if v, ok := m.Annotations[a.keys.RebootReason()]; ok {
		slim.Annotations = map[string]string{a.keys.RebootReason(): v}
	}
	return slim, nil
}

// sameFleetNode reports whether two versions of a slim NPU node count the
// same for the storm protection.
func sameFleetNode(old, cur any) bool {
	o, ok1 := old.(*metav1.PartialObjectMetadata)
	c, ok2 := cur.(*metav1.PartialObjectMetadata)
	return ok1 && ok2 && maps.Equal(o.Labels, c.Labels) && maps.Equal(o.Annotations, c.Annotations)
}

func (a *Agent) cachedLeases() []*coordinationv1.Lease {
	var out []*coordinationv1.Lease
	for _, o := range a.leases.List() {
		if l, ok := o.(*coordinationv1.Lease); ok {
			out = append(out, l)
		}
	}
	return out
}

// fleetInformer watches the metadata of the NPU nodes that ask for a
// reboot (reboot-required=true), all the storm protection counts. Built on
// the metadata client directly: client-go's metadatainformer package
// links the informer factory of every API group, memory each node's agent
// would map for nothing.
//
// Why not every NPU node: each of N agents would then receive every
// change of every NPU node, kubelet status updates included (each changes
// the resourceVersion), N² events for a fleet that does nothing. With the
// selector an idle fleet sends no event, and a rollout sends each agent
// two per node it reboots (the label set, then removed: the API server
// sends a node that stops matching as deleted).
func (a *Agent) fleetInformer() (cache.SharedIndexInformer, error) {
	selector, err := a.requestingSelector()
	if err != nil {
		return nil, err
	}
	nodes := a.cfg.Metadata.Resource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"})
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return nodes.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return nodes.Watch(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(lw, &metav1.PartialObjectMetadata{}, a.cfg.Resync, cache.Indexers{}), nil
}

// requestingSelector selects the NPU nodes with reboot-required=true.
func (a *Agent) requestingSelector() (string, error) {
	req, err := labels.NewRequirement(a.keys.RebootRequired(), selection.Equals, []string{contract.True})
	if err != nil {
		return "", fmt.Errorf("rebooter on node %s: select the NPU nodes asking for a reboot: %w", a.cfg.NodeName, err)
	}
	return a.cfg.NPUNodeSelector.Add(*req).String(), nil
}

// fleetSize is the number of NPU nodes, the base of a percentage
// --max-wedged-nodes, counted by a paginated metadata LIST at most once
// per fleetSizeTTL. Only a decision about this node's own recovery asks
// for it, so an idle fleet lists nothing.
func (a *Agent) fleetSize(ctx context.Context) (int, error) {
	now := a.cfg.Clock.Now()
	if !a.sizedAt.IsZero() && now.Sub(a.sizedAt) < fleetSizeTTL {
		return a.size, nil
	}
	nodes := a.cfg.Metadata.Resource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"})
	n, cont := 0, ""
	for {
		l, err := nodes.List(ctx, metav1.ListOptions{LabelSelector: a.cfg.NPUNodeSelector.String(), Limit: fleetSizePage, Continue: cont})
		if err != nil {
			return 0, fmt.Errorf("rebooter on node %s: count the NPU nodes (%s) for --max-wedged-nodes: %w", a.cfg.NodeName, a.cfg.NPUNodeSelector, err)
		}
		n += len(l.Items)
		if cont = l.GetContinue(); cont == "" {
			break
		}
	}
	a.size, a.sizedAt = n, now
	return n, nil
}

// watchFleet sets up the storm protection's informer (fleetInformer):
// metadata only, slimmed, since labels and annotations are all it reads
// and a fleet of full Node objects per agent would cost every node memory
// for nothing. Only a change of what it counts wakes the agent.
func (a *Agent) watchFleet() (cache.SharedIndexInformer, error) {
	inf, err := a.fleetInformer()
	if err != nil {
		return nil, err
	}
	if err := inf.SetTransform(a.slimFleetNode); err != nil {
		return nil, fmt.Errorf("rebooter on node %s: watch NPU nodes: %w", a.cfg.NodeName, err)
	}
	wake := func() { a.queue.Add(queueKey) }
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { a.metrics.fleetEvents.Inc(); wake() },
		UpdateFunc: func(old, cur any) {
			a.metrics.fleetEvents.Inc()
			if !sameFleetNode(old, cur) {
				wake()
			}
		},
		DeleteFunc: func(any) { a.metrics.fleetEvents.Inc(); wake() },
	})
	if err != nil {
		return nil, fmt.Errorf("rebooter on node %s: watch NPU nodes: %w", a.cfg.NodeName, err)
	}
	a.fleet = inf.GetStore()
	return inf, nil
}
