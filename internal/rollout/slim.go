package rollout

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// slimTransform keeps, of every cached object, only what BuildSnapshot
// reads. The pod cache holds every pod of the cluster (NPU workloads and
// re-roll targets may live anywhere), and a full pod is tens of
// kilobytes (env, volumes, managed fields); the rollout's memory would
// grow with the cluster's workloads rather than with its NPU nodes.
// It is idempotent: a slim object comes out unchanged.
func slimTransform(k contract.Keys) cache.TransformFunc {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *corev1.Pod:
			return slimPod(o, k), nil
		case *corev1.Node:
			return slimNode(o, k), nil
		case metav1.Object:
			o.SetManagedFields(nil)
		}
		return obj, nil
	}
}

func slimPod(p *corev1.Pod, k contract.Keys) *corev1.Pod {
	out := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName, InitContainers: npuContainers(p.Spec.InitContainers), Containers: npuContainers(p.Spec.Containers)},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}
	if ref := metav1.GetControllerOf(p); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	if daemonSetOwner(p) != "" {
		// Only pods without a DaemonSet are matched against the
		// wait-for-completion selector; a DaemonSet pod's labels are a
		// third of what the cache would hold for it.
		out.Labels = nil
	}
	if v, ok := p.Annotations[k.DriverSpecVersion()]; ok {
		out.Annotations = map[string]string{k.DriverSpecVersion(): v}
	}
	if c := podReady(p); c != nil {
		out.Status.Conditions = []corev1.PodCondition{*c}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil {
			out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, corev1.ContainerStatus{Name: cs.Name, State: corev1.ContainerState{Running: cs.State.Running}})
		}
	}
	return out
}

// npuContainers keeps the containers' NPU resources only.
func npuContainers(cs []corev1.Container) []corev1.Container {
	var out []corev1.Container
	for _, c := range cs {
		r := corev1.ResourceRequirements{Limits: npuResources(c.Resources.Limits), Requests: npuResources(c.Resources.Requests)}
		if r.Limits != nil || r.Requests != nil {
			out = append(out, corev1.Container{Name: c.Name, Resources: r})
		}
	}
	return out
}

func npuResources(l corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for name, q := range l {
		if strings.HasPrefix(string(name), NPUResourcePrefix) {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[name] = q
		}
	}
	return out
}

// slimNode keeps what a node view reads: name, labels (profile and
// canary selectors may name any), the contract's annotations, cordon,
// Ready and boot ID. A real node carries much more for others (images,
// addresses, capacity, kubelet and CSI annotations), and the rollout
// caches every NPU node.
func slimNode(n *corev1.Node, k contract.Keys) *corev1.Node {
	out := &corev1.Node{
		TypeMeta: n.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels,
			CreationTimestamp: n.CreationTimestamp, DeletionTimestamp: n.DeletionTimestamp,
		},
		Spec:   corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: n.Status.NodeInfo.BootID}},
	}
	prefix := k.Domain + "/"
	for key, v := range n.Annotations {
		if strings.HasPrefix(key, prefix) {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[key] = v
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return out
}
