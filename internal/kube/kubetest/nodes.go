// Package kubetest has in-memory stand-ins for unit tests of code that
// takes the narrow interfaces of package kube.
package kubetest

import (
	"context"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/openfuyao/npu-stack/internal/kube"
)

// Nodes is a kube.NodeClient over in-memory Nodes. Every patch bumps the
// resourceVersion, and PatchIf refuses a stale one with the API server's
// Conflict, so conditional-write logic is exercised, not skipped.
type Nodes struct {
	mu      sync.Mutex
	nodes   map[string]*corev1.Node
	version int
	// Patches counts the successful patches.
	Patches int
	// BeforePatch, if set, runs before each patch is applied: a test's
	// concurrent writer (it may call Patch itself; it is not called for
	// its own patches).
	BeforePatch func(name string)
	inHook      bool
	// changed is closed and replaced by every patch, waking Until.
	changed chan struct{}
}

var (
	_ kube.NodeClient = (*Nodes)(nil)
	_ kube.NodeWaiter = (*Nodes)(nil)
)

// NewNodes holds copies of nodes, each at a fresh resourceVersion.
func NewNodes(nodes ...*corev1.Node) *Nodes {
	n := &Nodes{nodes: map[string]*corev1.Node{}, changed: make(chan struct{})}
	for _, node := range nodes {
		c := node.DeepCopy()
		n.version++
		c.ResourceVersion = strconv.Itoa(n.version)
		n.nodes[c.Name] = c
	}
	return n
}

var nodeResource = schema.GroupResource{Resource: "nodes"}

// Get returns a copy of the node.
func (n *Nodes) Get(_ context.Context, name string) (*corev1.Node, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	node, ok := n.nodes[name]
	if !ok {
		return nil, apierrors.NewNotFound(nodeResource, name)
	}
	return node.DeepCopy(), nil
}

// Patch applies change.
func (n *Nodes) Patch(ctx context.Context, name string, change kube.NodeChange) (*corev1.Node, error) {
	return n.PatchIf(ctx, name, "", change)
}

// PatchIf applies change if the node is at resourceVersion ("" = any).
func (n *Nodes) PatchIf(_ context.Context, name, resourceVersion string, change kube.NodeChange) (*corev1.Node, error) {
	n.mu.Lock()
	if hook := n.BeforePatch; hook != nil && !n.inHook {
		n.inHook = true
		n.mu.Unlock()
		hook(name)
		n.mu.Lock()
		n.inHook = false
	}
	defer n.mu.Unlock()
	node, ok := n.nodes[name]
	if !ok {
		return nil, apierrors.NewNotFound(nodeResource, name)
	}
	if resourceVersion != "" && resourceVersion != node.ResourceVersion {
		return nil, apierrors.NewConflict(nodeResource, name, nil)
	}
	next := change.ApplyTo(node)
	n.version++
	next.ResourceVersion = strconv.Itoa(n.version)
	n.nodes[name] = next
	n.Patches++
	close(n.changed)
	n.changed = make(chan struct{})
	return next.DeepCopy(), nil
}

// Until blocks until the node meets cond (checked now and after every
// patch) or ctx ends, as kube.NodeWatch does against an API server.
func (n *Nodes) Until(ctx context.Context, name string, cond func(*corev1.Node) bool) (*corev1.Node, error) {
	for {
		n.mu.Lock()
		node, ok := n.nodes[name]
		changed := n.changed
		var c *corev1.Node
		if ok {
			c = node.DeepCopy()
		}
		n.mu.Unlock()
		if ok && cond(c) {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		}
	}
}
