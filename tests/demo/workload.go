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

// workloadName is the demo's NPU workload: on each real node, one pod
// asking for one chip (huawei.com/Ascend910 or Ascend310P), in the
// namespace workloadNamespace, which enforces Pod Security "baseline".
const (
	workloadName      = "npu-workload"
	workloadNamespace = "ml"
)

// workloadScript prints the Ascend device nodes the container got and the
// driver version npu-smi reports through the driver libraries the NRI
// injector gave it (bash builtins only: the image has bash and no
// coreutils; npu-smi is dynamically linked against the driver's
// libraries, so it runs only if the injector gave them and the loader
// path), then sleeps until it is stopped: it reads a pipe it holds both
// ends of (a process substitution reopened read-write), so a read only
// ever times out; any other end of the read fails the container rather
// than spin.
const workloadScript = `echo "devices:" /dev/davinci*
while IFS= read -r l; do [[ $l == *"Version: "* ]] && { l=${l#*Version: }; echo "driver: ${l%% *}"; }; [[ $l == *"error while loading"* || $l == *"not found"* ]] && echo "npu-smi: $l"; done < <(npu-smi info 2>&1)
exec 3<> <(:); while read -r -t 3600 -u 3 || [ $? -gt 128 ]; do :; done; echo "sleep pipe closed"; exit 1`

// oneChip is the workload's log when it got exactly one chip besides the
// control device davinci_manager (the stand-in device plugin, as v7.3.0,
// hands over the chip's /dev/davinci<N> and the control devices) and
// npu-smi ran against the driver libraries (its driver version).
var oneChip = regexp.MustCompile(`^devices: (/dev/davinci[0-9]+ /dev/davinci_manager|/dev/davinci_manager /dev/davinci[0-9]+)\ndriver: (\S+)$`)

// startWorkloads creates the workload on each real node, in image (the
// stand-in device plugin's, which has bash), as docs/workloads.md's
// "Run a workload" writes it: only resources.limits, no volume and no env,
// in a namespace enforcing Pod Security "baseline"; it waits for each pod
// to run with its chip and driver version.
func (s *Story) startWorkloads(ctx context.Context, image, version string) error {
	doc, err := testbed.DocumentedWorkload()
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloadNamespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}
	if _, err := s.Env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("namespace %s: %w", workloadNamespace, err)
	}
	s.workloads = map[string]types.UID{}
	for _, node := range s.Fleet.Real {
		c := *doc.Spec.Containers[0].DeepCopy()
		if len(c.Env)+len(c.VolumeMounts)+len(doc.Spec.Volumes) > 0 {
			return fmt.Errorf("docs/workloads.md's workload has env, mounts or volumes: it must only request the chip")
		}
		c.Image, c.Command = image, []string{"/bin/bash", "-c", workloadScript}
		c.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(node.Chips.ResourceName()): resource.MustParse("1")}}
		labels := map[string]string{"app": workloadName, "node": node.Name()}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: workloadName + "-" + node.Chip},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						NodeSelector:                  map[string]string{corev1.LabelHostname: node.Name()},
						TerminationGracePeriodSeconds: ptr.To[int64](1),
						Containers:                    []corev1.Container{c},
					},
				},
			},
		}
		if _, err := s.Env.Client.AppsV1().Deployments(workloadNamespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("workload %s: %w", d.Name, err)
		}
	}
	return s.workloadsRunning(ctx, version)
}

// workloadsRunning waits, on each real node, for a running pod of the
// workload other than the one seen before, whose log shows exactly one
// chip and npu-smi reporting driver version.
func (s *Story) workloadsRunning(ctx context.Context, version string) error {
	for _, node := range s.Fleet.Real {
		uid, err := s.workloadRunning(ctx, node, s.workloads[node.Name()], version)
		if err != nil {
			return err
		}
		s.workloads[node.Name()] = uid
	}
	return nil
}

func (s *Story) workloadRunning(ctx context.Context, node *RealNode, before types.UID, version string) (types.UID, error) {
	var pod *corev1.Pod
	err := testbed.WaitFor(ctx, testbed.PodsLW(s.Env.Client, workloadNamespace, "app="+workloadName+",node="+node.Name()), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
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
		b, err := s.Env.Client.CoreV1().Pods(workloadNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		line = strings.TrimSpace(string(b))
		return err == nil && strings.Count(string(b), "\n") >= 2, nil
	})
	if err != nil {
		return "", fmt.Errorf("workload pod %s on %s: log %q: %w", pod.Name, node.Name(), line, err)
	}
	m := oneChip.FindStringSubmatch(line)
	if m == nil || m[2] != version {
		return "", fmt.Errorf("workload pod %s on %s: log %q, want one chip's /dev/davinci<N> and /dev/davinci_manager, and npu-smi (through the driver libraries the NRI injector gives) reporting driver %s", pod.Name, node.Name(), line, version)
	}
	s.printf("   ✓ workload pod %s/%s on %s (baseline namespace, no volume, no env) asked for 1 %s and got %s; npu-smi in it reports driver %s (+%s)\n",
		workloadNamespace, pod.Name, node.Name(), node.Chips.ResourceName(), m[1], m[2], s.elapsed())
	return pod.UID, nil
}
