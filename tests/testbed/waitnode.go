package testbed

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// WaitNode waits until cond holds for the node named name and returns it;
// on timeout the test fails with what it waited for and the node's last
// labels, annotations, cordon and boot ID.
func WaitNode(ctx context.Context, t testing.TB, client kubernetes.Interface, name, what string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", name))
	var last *corev1.Node
	err := WaitFor(ctx, lw, &corev1.Node{}, func(ns []*corev1.Node) (bool, error) {
		for _, n := range ns {
			last = n
			if cond(n) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		desc := "no node"
		if last != nil {
			desc = fmt.Sprintf("labels %v annotations %v unschedulable %v bootID %s", last.Labels, last.Annotations, last.Spec.Unschedulable, last.Status.NodeInfo.BootID)
		}
		t.Fatalf("node %s: %s: %v (%s)", name, what, err, desc)
	}
	return last
}

// NodeEventsLW lists and watches the Events of reason on the node named
// node.
func NodeEventsLW(client kubernetes.Interface, node, reason string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "events", "",
		fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node, "reason": reason}.AsSelector())
}

// WaitNodeEvent waits for an Event of reason on node whose message
// contains substr and returns it; on timeout the test fails listing the
// messages seen.
func WaitNodeEvent(ctx context.Context, t testing.TB, client kubernetes.Interface, node, reason, substr string) *corev1.Event {
	t.Helper()
	var found *corev1.Event
	var msgs []string
	err := WaitFor(ctx, NodeEventsLW(client, node, reason), &corev1.Event{}, func(evs []*corev1.Event) (bool, error) {
		msgs = msgs[:0]
		for _, e := range evs {
			if strings.Contains(e.Message, substr) {
				found = e
				return true, nil
			}
			msgs = append(msgs, e.Message)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event on node %s containing %q: %v (have %q)", reason, node, substr, err, msgs)
	}
	return found
}
