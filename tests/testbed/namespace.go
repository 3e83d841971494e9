package testbed

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// DeleteNamespace deletes namespace name and waits until the namespace
// controller has removed it with everything in it, so that a test after
// this one finds the name free (an absent namespace is no error). A
// namespace still Terminating at ctx's end is an error naming what is
// left in it, from its status conditions.
func (e *Env) DeleteNamespace(ctx context.Context, name string) error {
	err := e.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	lw := cache.NewListWatchFromClient(e.Client.CoreV1().RESTClient(), "namespaces", "", fields.OneTermEqualSelector("metadata.name", name))
	err = WaitFor(ctx, lw, &corev1.Namespace{}, func(nss []*corev1.Namespace) (bool, error) { return len(nss) == 0, nil })
	if err == nil {
		return nil
	}
	// What is left, from the namespace controller's conditions.
	getCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns, getErr := e.Client.CoreV1().Namespaces().Get(getCtx, name, metav1.GetOptions{})
	if getErr != nil {
		return fmt.Errorf("wait for namespace %s to be deleted: %w (and get it: %w)", name, err, getErr)
	}
	var left []string
	for _, c := range ns.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			left = append(left, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	return fmt.Errorf("namespace %s still %s (%s): %w", name, ns.Status.Phase, strings.Join(left, "; "), err)
}
