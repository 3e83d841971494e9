package reboot

// What the agent caches of the fleet: the other NPU nodes (slimmed to the
// keys storm protection reads) and the reboot slots' Leases.

import (
	"context"
	"maps"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

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

// fleetInformer watches the metadata of the NPU nodes. Built on the
// metadata client directly: client-go's metadatainformer package links
// the informer factory of every API group, memory each node's agent
// would map for nothing.
func (a *Agent) fleetInformer() cache.SharedIndexInformer {
	nodes := a.cfg.Metadata.Resource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"})
	selector := a.cfg.NPUNodeSelector.String()
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
	return cache.NewSharedIndexInformer(lw, &metav1.PartialObjectMetadata{}, a.cfg.Resync, cache.Indexers{})
}
