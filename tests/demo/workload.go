package demo

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// workloadName is the demo's NPU workload: one pod asking for one
// huawei.com/Ascend910 on the real 910B node.
const workloadName = "npu-workload"

// workloadScript prints the Ascend device nodes the container got (bash
// builtins only: the image has bash and no coreutils), then sleeps until
// it is stopped: it reads a pipe it holds both ends of (a process
// substitution reopened read-write), so a read only ever times out; any
// other end of the read fails the container rather than spin.
const workloadScript = `echo "devices:" /dev/davinci*; exec 3<> <(:); while read -r -t 3600 -u 3 || [ $? -gt 128 ]; do :; done; echo "sleep pipe closed"; exit 1`

// oneChip is the workload's log line when it got exactly one chip besides
// the control device davinci_manager (the stand-in device plugin, as
// v7.3.0, hands over the chip's /dev/davinci<N> and the control devices).
var oneChip = regexp.MustCompile(`^devices: (/dev/davinci[0-9]+ /dev/davinci_manager|/dev/davinci_manager /dev/davinci[0-9]+)$`)

// startWorkload creates the workload on the real 910B node, in image (the
// stand-in device plugin's, which has bash), and waits for its pod to run
// with its chip.
func (s *Story) startWorkload(ctx context.Context, image string) (types.UID, error) {
	node := s.Fleet.Real[0]
	labels := map[string]string{"app": workloadName}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: workloadName},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{corev1.LabelHostname: node.Name()},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{
						Name: "train", Image: image, Command: []string{"/bin/bash", "-c", workloadScript},
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
							corev1.ResourceName(node.Chips.ResourceName()): resource.MustParse("1"),
						}},
					}},
				},
			},
		},
	}
	if _, err := s.Env.Client.AppsV1().Deployments(metav1.NamespaceDefault).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("workload %s: %w", workloadName, err)
	}
	return s.workloadRunning(ctx, "")
}

// workloadRunning waits for a running pod of the workload on the real
// 910B node other than the pod before, and for its log to show exactly
// one chip; it returns the pod's UID.
func (s *Story) workloadRunning(ctx context.Context, before types.UID) (types.UID, error) {
	node := s.Fleet.Real[0]
	var pod *corev1.Pod
	err := testbed.WaitFor(ctx, testbed.PodsLW(s.Env.Client, metav1.NamespaceDefault, "app="+workloadName), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if p.UID != before && p.Spec.NodeName == node.Name() && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				pod = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("workload %s on %s: waiting for a running pod: %w", workloadName, node.Name(), err)
	}
	// A container is Running before its first line is written: poll its
	// log (a log has nothing to watch).
	var line string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		b, err := s.Env.Client.CoreV1().Pods(metav1.NamespaceDefault).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		line = strings.TrimSpace(string(b))
		return err == nil && strings.HasSuffix(string(b), "\n"), nil
	})
	if err != nil {
		return "", fmt.Errorf("workload pod %s on %s: log %q: %w", pod.Name, node.Name(), line, err)
	}
	if !oneChip.MatchString(line) {
		return "", fmt.Errorf("workload pod %s on %s: log %q, want one chip's /dev/davinci<N> and /dev/davinci_manager", pod.Name, node.Name(), line)
	}
	s.printf("   ✓ workload pod %s on %s asked for 1 %s and got %s (+%s)\n", pod.Name, node.Name(), node.Chips.ResourceName(), strings.TrimPrefix(line, "devices: "), s.elapsed())
	return pod.UID, nil
}
