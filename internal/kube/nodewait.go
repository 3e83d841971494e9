package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// NodeWaiter waits for a Node to meet a condition.
type NodeWaiter interface {
	Until(ctx context.Context, name string, cond func(*corev1.Node) bool) (*corev1.Node, error)
}

// NodeWatch is the NodeWaiter of a clientset: a list-watch of the one
// Node (list and watch on nodes, by metadata.name), so the wait survives
// dropped watches and starts from the Node as it is now.
type NodeWatch struct{ Client kubernetes.Interface }

var _ NodeWaiter = NodeWatch{}

// Until blocks until the node named name meets cond and returns it, or
// until ctx ends.
func (w NodeWatch) Until(ctx context.Context, name string, cond func(*corev1.Node) bool) (*corev1.Node, error) {
	lw := cache.NewListWatchFromClient(w.Client.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", name))
	ev, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, nil, func(e watch.Event) (bool, error) {
		n, ok := e.Object.(*corev1.Node)
		return ok && e.Type != watch.Deleted && cond(n), nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for node %s: %w", name, err)
	}
	return ev.Object.(*corev1.Node), nil
}
