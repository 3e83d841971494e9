package docs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestDocumentedWorkloadPassesPodSecurity sends installation.md's
// workload, as written, to the API server in a namespace enforcing Pod
// Security "baseline": it is admitted (it only requests a chip), while the
// hostPath recipe for runtimes without NRI is refused, as the page says.
// It runs on a real node in tests/realnode
// (TestRealNodeInjectsDriverIntoChipContainers) and in the demo.
func TestDocumentedWorkloadPassesPodSecurity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod, err := testbed.DocumentedWorkload()
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if len(c.Env)+len(c.EnvFrom)+len(c.VolumeMounts)+len(pod.Spec.Volumes) > 0 || len(pod.Annotations) > 0 || len(c.Resources.Limits) != 1 {
		t.Errorf("the documented workload asks for more than a chip: %+v", pod.Spec)
	}
	// Its namespace, as the page's commands make it (TestDocCommandsRun
	// may have run them already).
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pod.Namespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		patch := []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"baseline"}}}`)
		_, err = env.Client.CoreV1().Namespaces().Patch(ctx, ns.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if _, err := env.Client.CoreV1().Pods(ns.Name).Create(ctx, pod, dryRun); err != nil {
		t.Errorf("the documented workload is refused in a baseline namespace: %v", err)
	}
	recipe, volumes, err := testbed.DocumentedRecipe()
	if err != nil {
		t.Fatal(err)
	}
	recipe.Image = c.Image
	mounted := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "recipe"}, Spec: corev1.PodSpec{Containers: []corev1.Container{recipe}, Volumes: volumes}}
	if _, err := env.Client.CoreV1().Pods(ns.Name).Create(ctx, mounted, dryRun); err == nil || !strings.Contains(err.Error(), "hostPath") {
		t.Errorf("the hostPath recipe in a baseline namespace: %v; want refused for its hostPath volumes, as the page says", err)
	}
}
