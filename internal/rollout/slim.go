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
			return slimNode(o), nil
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

// slimNode drops what a node carries for others: the image list (up to
// 50 entries on a real node), volumes and managed fields.
func slimNode(n *corev1.Node) *corev1.Node {
	n.ManagedFields = nil
	n.Status.Images = nil
	n.Status.VolumesInUse = nil
	n.Status.VolumesAttached = nil
	return n
}
