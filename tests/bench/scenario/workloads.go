package scenario

import (
	"context"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// WorkloadNamespace holds the ordinary pods of every node.
const WorkloadNamespace = "npu-bench-workloads"

// replicasPerNode are the pods of each node's ReplicaSet (with an
// emptyDir); with its bare pod, each node runs replicasPerNode+1 pods
// that use no NPU, as a real fleet's nodes run agents and services
// beside the training jobs.
const replicasPerNode = 2

// WorkloadPodsPerNode is the ordinary pods on each node.
const WorkloadPodsPerNode = replicasPerNode + 1

// addWorkloads puts ordinary pods on every NPU node, the wedged one
// included: a ReplicaSet pinned to the node whose pods have an emptyDir
// and a bare pod without an owner. With the default npuPodDeletion they
// must neither block an upgrade nor be touched by it, and the rollout
// must not cache them.
func (b *Bed) addWorkloads(ctx context.Context) error {
	env := b.cfg.Env
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: WorkloadNamespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", WorkloadNamespace, err)
	}
	return b.addWorkloadsOn(ctx, contract.LabelNPUPresent+"=true")
}

// addWorkloadsOn puts the ordinary pods on every node of selector.
func (b *Bed) addWorkloadsOn(ctx context.Context, selector string) error {
	env := b.cfg.Env
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("list the nodes %s: %w", selector, err)
	}
	work := make(chan string)
	var wg sync.WaitGroup
	errs := make([]error, createWorkers)
	for w := 0; w < createWorkers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for node := range work {
				if errs[w] == nil {
					errs[w] = b.addNodeWorkloads(ctx, node)
				}
			}
		}(w)
	}
	for _, n := range nodes.Items {
		work <- n.Name
	}
	close(work)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	want := WorkloadPodsPerNode * len(nodes.Items)
	selected := map[string]bool{}
	for _, n := range nodes.Items {
		selected[n.Name] = true
	}
	var running int
	// The namespace may hold another fleet's pods already (the peer's
	// nodes get theirs after npu-stack's): only these nodes' count.
	err = testbed.WaitFor(ctx, testbed.PodsLW(env.Client, WorkloadNamespace, ""), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		running = 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning && selected[p.Spec.NodeName] {
				running++
			}
		}
		return running == want, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the ordinary pods (%d of %d running): %w", running, want, err)
	}
	return nil
}

func (b *Bed) addNodeWorkloads(ctx context.Context, node string) error {
	client := b.cfg.Env.Client
	image := b.cfg.Env.Product.PauseImage
	labels := map[string]string{"app": "cache", "node": node}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "cache-" + node, Namespace: WorkloadNamespace},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](replicasPerNode),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "cache", Image: image,
					VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}},
					Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}},
			},
		},
	}
	if _, err := client.AppsV1().ReplicaSets(WorkloadNamespace).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the ReplicaSet of node %s: %w", node, err)
	}
	bare := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-" + node, Namespace: WorkloadNamespace, Labels: map[string]string{"app": "agent"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agent", Image: image}}},
	}
	if _, err := client.CoreV1().Pods(WorkloadNamespace).Create(ctx, bare, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the bare pod of node %s: %w", node, err)
	}
	return nil
}
