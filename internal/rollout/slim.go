package rollout

import (
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// slimTransform keeps, of every cached object, only what BuildSnapshot
// reads. The pod cache holds the pods of every NPU node and NPU workload
// (cacheScope), and a full pod is tens of kilobytes (env, volumes,
// managed fields). Pods become CachedPods. It is idempotent: a slim
// object comes out unchanged.
func slimTransform(k contract.Keys) cache.TransformFunc {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *corev1.Pod:
			return cachePod(o, k), nil
		case *CachedPod:
			return o, nil
		case *corev1.Node:
			return slimNode(o, k), nil
		case *appsv1.DaemonSet:
			return slimDaemonSet(o), nil
		case metav1.Object:
			o.SetManagedFields(nil)
		}
		return obj, nil
	}
}

// CachedPod is what the rollout keeps of a pod: the few fields a node
// view reads, a fifth of a *corev1.Pod (whose struct alone is 1.2 kB).
// The pod cache holds several pods per NPU node, so this is most of the
// rollout's memory on a large fleet.
type CachedPod struct {
	metav1.TypeMeta
	// ObjectMeta keeps name, namespace, UID, resourceVersion, deletion
	// time, the labels of pods without a DaemonSet (matched against the
	// wait-for-completion selector) and the driver-version annotation.
	metav1.ObjectMeta
	NodeName string
	Phase    corev1.PodPhase
	// DaemonSet is the UID of the controlling DaemonSet, "" if none.
	DaemonSet string
	// NPU: some container requests or limits an NPU resource.
	NPU bool
	// Ready is the Ready condition, true since ReadyAt.
	Ready   bool
	ReadyAt time.Time
	// Started is when a main container last started (zero: none runs).
	Started time.Time
}

// DeepCopyObject makes CachedPod a runtime.Object, as the informer's
// store needs.
func (p *CachedPod) DeepCopyObject() runtime.Object {
	out := *p
	p.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// cachePod reduces a pod to what the rollout reads of it.
func cachePod(p *corev1.Pod, k contract.Keys) *CachedPod {
	out := &CachedPod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			DeletionTimestamp: p.DeletionTimestamp,
		},
		NodeName: p.Spec.NodeName, Phase: p.Status.Phase, DaemonSet: daemonSetOwner(p), NPU: kube.IsNPUPod(p),
	}
	if out.DaemonSet == "" {
		out.Labels = p.Labels
	}
	if v, ok := p.Annotations[k.DriverSpecVersion()]; ok {
		out.Annotations = map[string]string{k.DriverSpecVersion(): v}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			out.Ready, out.ReadyAt = true, c.LastTransitionTime.Time
		}
	}
	// A device plugin restarted after a reboot is a new process, but one
	// that started before the driver was ready may hold stale handles.
	for _, cs := range p.Status.ContainerStatuses {
		if r := cs.State.Running; r != nil && r.StartedAt.After(out.Started) {
			out.Started = r.StartedAt.Time
		}
	}
	return out
}

// daemonSetOwner is the UID of the pod's controlling DaemonSet, "" if none.
func daemonSetOwner(p *corev1.Pod) string {
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "DaemonSet" {
		return string(ref.UID)
	}
	return ""
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

// slimDaemonSet keeps what a node view and the re-roll targets read:
// name, namespace, UID, labels, and of the pod template its annotations
// (the driver's spec version) and node selector (the driver's profile).
// The rest of the template (containers, volumes, env) is most of a
// DaemonSet.
func slimDaemonSet(ds *appsv1.DaemonSet) *appsv1.DaemonSet {
	out := &appsv1.DaemonSet{
		TypeMeta: ds.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: ds.Name, Namespace: ds.Namespace, UID: ds.UID, ResourceVersion: ds.ResourceVersion, Labels: ds.Labels,
			DeletionTimestamp: ds.DeletionTimestamp,
		},
	}
	out.Spec.Template.Annotations = ds.Spec.Template.Annotations
	out.Spec.Template.Spec.NodeSelector = ds.Spec.Template.Spec.NodeSelector
	return out
}

// SlimTransform is the informer transform of the rollout's caches, for
// other readers of the same objects (the fleet exporter): nodes keep what
// BuildSnapshot reads, DaemonSets their template's annotations and node
// selector.
func SlimTransform(k contract.Keys) cache.TransformFunc { return slimTransform(k) }
