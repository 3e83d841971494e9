package testbed

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
)

// NewNamespace creates a namespace named after base with a random suffix
// (so -count=N reruns in one cluster stay apart) and waits for its default
// service account, which pods need.
func (e *Env) NewNamespace(ctx context.Context, base string) (string, error) {
	base = strings.Trim(strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(base)), "-")
	if len(base) > 40 {
		base = strings.TrimRight(base[:40], "-")
	}
	ns, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: base + "-"}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create namespace %s-*: %w", base, err)
	}
	lw := cache.NewListWatchFromClient(e.Client.CoreV1().RESTClient(), "serviceaccounts", ns.Name, fields.OneTermEqualSelector("metadata.name", "default"))
	if err := WaitFor(ctx, lw, &corev1.ServiceAccount{}, func(sas []*corev1.ServiceAccount) (bool, error) { return len(sas) > 0, nil }); err != nil {
		return "", fmt.Errorf("default service account of %s: %w", ns.Name, err)
	}
	return ns.Name, nil
}
