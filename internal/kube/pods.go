package kube

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// IsNPUPod reports whether pod requests or limits an NPU resource in any
// container, init containers included: such a pod uses the chips and must
// be gone before a reboot.
func IsNPUPod(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, list := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				for name := range list {
					if strings.HasPrefix(string(name), contract.NPUResourcePrefix) {
						return true
					}
				}
			}
		}
	}
	return false
}

// PodInitialized reports whether the pod's init containers have all
// completed: a pod of the chart still waiting in its wait-for-driver gate
// is not, and holds no chip.
func PodInitialized(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodInitialized {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
