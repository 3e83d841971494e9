package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	"sigs.k8s.io/yaml"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// workloadName is the demo's NPU workload: one pod asking for one
// huawei.com/Ascend910 on the real 910B node.
const workloadName = "npu-workload"

// workloadScript prints the Ascend device nodes the container got and the
// driver version npu-smi reports through the driver libraries the pod
// mounts (bash builtins only: the image has bash and no coreutils;
// npu-smi is dynamically linked against the driver's libraries, so it
// runs only with the documented mounts and LD_LIBRARY_PATH), then sleeps
// until it is stopped: it reads a pipe it holds both ends of (a process
// substitution reopened read-write), so a read only ever times out; any
// other end of the read fails the container rather than spin.
const workloadScript = `echo "devices:" /dev/davinci*
while IFS= read -r l; do [[ $l == *"Version: "* ]] && { l=${l#*Version: }; echo "driver: ${l%% *}"; }; [[ $l == *"error while loading"* ]] && echo "npu-smi: $l"; done < <(npu-smi info 2>&1)
exec 3<> <(:); while read -r -t 3600 -u 3 || [ $? -gt 128 ]; do :; done; echo "sleep pipe closed"; exit 1`

// documentedMounts is the pod spec docs/installation.md gives a workload
// for the driver libraries ("How workloads get the driver libraries"):
// its container's env and volume mounts, and its volumes.
func documentedMounts() (corev1.Container, []corev1.Volume, error) {
	root, err := testbed.RepoRoot()
	if err != nil {
		return corev1.Container{}, nil, err
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "installation.md"))
	if err != nil {
		return corev1.Container{}, nil, err
	}
	m := regexp.MustCompile("(?s)## How workloads get the driver libraries\n.*?```yaml\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		return corev1.Container{}, nil, fmt.Errorf("docs/installation.md: no yaml block under \"How workloads get the driver libraries\"")
	}
	var pod struct {
		Spec corev1.PodSpec `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(m[1], &pod); err != nil {
		return corev1.Container{}, nil, fmt.Errorf("docs/installation.md, the workload's pod spec: %w", err)
	}
	if len(pod.Spec.Containers) != 1 {
		return corev1.Container{}, nil, fmt.Errorf("docs/installation.md, the workload's pod spec: %d containers, want 1", len(pod.Spec.Containers))
	}
	return pod.Spec.Containers[0], pod.Spec.Volumes, nil
}

// oneChip is the workload's log when it got exactly one chip besides the
// control device davinci_manager (the stand-in device plugin, as v7.3.0,
// hands over the chip's /dev/davinci<N> and the control devices) and
// npu-smi ran against the driver libraries (its driver version).
var oneChip = regexp.MustCompile(`^devices: (/dev/davinci[0-9]+ /dev/davinci_manager|/dev/davinci_manager /dev/davinci[0-9]+)\ndriver: (\S+)$`)

// startWorkload creates the workload on the real 910B node, in image (the
// stand-in device plugin's, which has bash), with the driver libraries
// mounted as docs/installation.md documents, and waits for its pod to run
// with its chip and driver version.
func (s *Story) startWorkload(ctx context.Context, image, version string) (types.UID, error) {
	node := s.Fleet.Real[0]
	libs, volumes, err := documentedMounts()
	if err != nil {
		return "", err
	}
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
					Volumes:                       volumes,
					Containers: []corev1.Container{{
						Name: "train", Image: image, Command: []string{"/bin/bash", "-c", workloadScript},
						Env: libs.Env, VolumeMounts: libs.VolumeMounts,
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
	return s.workloadRunning(ctx, "", version)
}

// workloadRunning waits for a running pod of the workload on the real
// 910B node other than the pod before, and for its log to show exactly
// one chip and npu-smi reporting driver version; it returns the pod's UID.
func (s *Story) workloadRunning(ctx context.Context, before types.UID, version string) (types.UID, error) {
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
		return err == nil && strings.Count(string(b), "\n") >= 2, nil
	})
	if err != nil {
		return "", fmt.Errorf("workload pod %s on %s: log %q: %w", pod.Name, node.Name(), line, err)
	}
	m := oneChip.FindStringSubmatch(line)
	if m == nil || m[2] != version {
		return "", fmt.Errorf("workload pod %s on %s: log %q, want one chip's /dev/davinci<N> and /dev/davinci_manager, and npu-smi (through the driver libraries docs/installation.md mounts) reporting driver %s", pod.Name, node.Name(), line, version)
	}
	s.printf("   ✓ workload pod %s on %s asked for 1 %s and got %s; npu-smi in it, on the mounted driver libraries, reports driver %s (+%s)\n",
		pod.Name, node.Name(), node.Chips.ResourceName(), m[1], m[2], s.elapsed())
	return pod.UID, nil
}
