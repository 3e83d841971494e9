package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestIsNPUPod(t *testing.T) {
	npu := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{"huawei.com/Ascend910": {}},
	}}}}}
	cpu := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceCPU: {}},
	}}}}}
	initNPU := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{"huawei.com/Ascend310P": {}},
	}}}}}
	if !IsNPUPod(npu) || IsNPUPod(cpu) || !IsNPUPod(initNPU) {
		t.Fatalf("IsNPUPod: npu %v cpu %v init %v", IsNPUPod(npu), IsNPUPod(cpu), IsNPUPod(initNPU))
	}
}
