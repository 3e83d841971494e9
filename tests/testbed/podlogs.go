package testbed

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodLogs returns the last lines of every container log of every pod in
// namespace that runs on a process node, for a failed test's report.
func (e *Env) PodLogs(ctx context.Context, namespace string, lines int) string {
	pods, err := e.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("list pods of %s: %v", namespace, err)
	}
	var b strings.Builder
	for _, p := range pods.Items {
		node, ok := e.ProcessNode(p.Spec.NodeName)
		if !ok {
			continue
		}
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			if l := node.Logs(namespace, p.Name, c.Name); l != "" {
				fmt.Fprintf(&b, "--- %s/%s on %s:\n%s\n", p.Name, c.Name, p.Spec.NodeName, Tail(l, lines))
			}
		}
	}
	return b.String()
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
