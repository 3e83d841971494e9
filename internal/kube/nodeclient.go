package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// NodeClient is the part of the API a node agent uses on its own Node:
// read it, and patch labels, annotations and the cordon, unconditionally
// or only at a resourceVersion. Agents take it rather than a clientset so
// that their logic is unit-tested against an in-memory Node (kubetest)
// and the real API server is left to the integration tests.
type NodeClient interface {
	Get(ctx context.Context, name string) (*corev1.Node, error)
	Patch(ctx context.Context, name string, change NodeChange) (*corev1.Node, error)
	// PatchIf fails with a Conflict when the node moved past
	// resourceVersion.
	PatchIf(ctx context.Context, name, resourceVersion string, change NodeChange) (*corev1.Node, error)
}

// Nodes is the NodeClient of a clientset.
type Nodes struct{ Client kubernetes.Interface }

var _ NodeClient = Nodes{}

// Get reads the node named name.
func (n Nodes) Get(ctx context.Context, name string) (*corev1.Node, error) {
	node, err := n.Client.CoreV1().Nodes().Get(ctx, name, metaGetOptions)
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", name, err)
	}
	return node, nil
}

// Patch applies change (PatchNode).
func (n Nodes) Patch(ctx context.Context, name string, change NodeChange) (*corev1.Node, error) {
	return PatchNode(ctx, n.Client, name, change)
}

// PatchIf applies change at resourceVersion (PatchNodeIf).
func (n Nodes) PatchIf(ctx context.Context, name, resourceVersion string, change NodeChange) (*corev1.Node, error) {
	return PatchNodeIf(ctx, n.Client, name, resourceVersion, change)
}
