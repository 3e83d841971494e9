package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// Recorder emits Events about Nodes.
type Recorder struct {
	rec         record.EventRecorder
	broadcaster record.EventBroadcaster
}

// NewRecorder starts an event broadcaster writing as component (the
// event's source). Call Shutdown to flush before the process exits.
func NewRecorder(client kubernetes.Interface, component string) *Recorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return &Recorder{rec: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component}), broadcaster: b}
}

// Shutdown flushes pending events and stops the broadcaster.
func (r *Recorder) Shutdown() { r.broadcaster.Shutdown() }

// Node records an event on node. Node events live in the default
// namespace, where `kubectl get events -A` and `kubectl describe node` find
// them.
func (r *Recorder) Node(node *corev1.Node, warning bool, reason contract.EventReason, format string, args ...any) {
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	ref := &corev1.ObjectReference{Kind: "Node", Name: node.Name, UID: node.UID, APIVersion: "v1"}
	r.rec.Eventf(ref, typ, string(reason), format, args...)
}

// NodeByName records an event on a node known only by name.
func (r *Recorder) NodeByName(ctx context.Context, client kubernetes.Interface, name string, warning bool, reason contract.EventReason, format string, args ...any) error {
	n, err := client.CoreV1().Nodes().Get(ctx, name, metaGetOptions)
	if err != nil {
		return fmt.Errorf("get node %s for a %s event: %w", name, reason, err)
	}
	r.Node(n, warning, reason, format, args...)
	return nil
}
