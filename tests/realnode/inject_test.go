package realnode_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/openfuyao/npu-stack/internal/npusmi"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/standin"
)

// TestRealNodeInjectsDriverIntoChipContainers installs the chart with
// cdi.inject on a real 910B node (containerd 2.4 with its default NRI)
// and runs, in a namespace enforcing Pod Security "baseline", a pod with
// no volume and no env: its container requesting one huawei.com/Ascend910
// sees only its allocated /dev/davinciN and runs npu-smi, which reports
// the installed driver; the pod's other container, with no chip, gets
// neither the driver nor npu-smi.
func TestRealNodeInjectsDriverIntoChipContainers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	b, _ := startBed(ctx, t, bedSpec{prefix: "inject", os: "ubuntu22.04", image: func(u *standin.UserSpace, _ string) (v1.ImageIndex, error) { return u.DriverImage() }})
	b.vals["cdi"] = map[string]any{"inject": true}
	b.installChart(ctx, b.images[standinVersion])
	res := corev1.ResourceName(standin.NewChips(standin.Model910B, bedChips).ResourceName())
	// The device plugin's gate waits for the injector: chips advertised
	// means the injector is registered with containerd.
	testbed.WaitNode(ctx, t, env.Client, b.node.Name(), fmt.Sprintf("allocatable %s = %d", res, bedChips), allocatable(res, bedChips))
	t.Logf("chart up, chips advertised after %s", time.Since(start).Round(time.Second))

	ns, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "workload-",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	image := renderedImages(ctx, t, b.ns, b.vals)["device-plugin"] // bash and a C library, no driver
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "workload", Labels: map[string]string{"app": "workload"}},
		Spec: corev1.PodSpec{
			NodeName: b.node.Name(), RestartPolicy: corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false), TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{
				{Name: "train", Image: image, Command: []string{"/bin/bash", "-c", `printf '%s\n' /dev/* && echo "visible=$ASCEND_VISIBLE_DEVICES" && npu-smi info`},
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{res: resource.MustParse("1")}}},
				// bash builtins only: the image has no coreutils.
				{Name: "side", Image: image, Command: []string{"/bin/bash", "-c", `for p in /usr/local/Ascend/driver/lib64 /usr/local/Ascend/driver/version.info /usr/local/bin/npu-smi /etc/ascend_install.info; do [ -e "$p" ] && echo "has $p"; done; echo "visible=$ASCEND_VISIBLE_DEVICES"; printf '%s\n' /dev/*`}},
			},
		},
	}
	if _, err := env.Client.CoreV1().Pods(ns.Name).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("baseline namespace refuses the workload: %v", err)
	}
	code, logs := waitTerminated(ctx, t, ns.Name, "workload", "train")
	if code != 0 {
		logPods(t, ns.Name)
		t.Fatalf("chip container: exit %d, log:\n%s", code, logs)
	}
	devs, table, _ := strings.Cut(logs, "+")
	var mine []string
	for _, l := range strings.Split(devs, "\n") {
		if strings.HasPrefix(l, "/dev/davinci") && l != "/dev/davinci_manager" {
			mine = append(mine, l)
		}
	}
	if len(mine) != 1 || !strings.Contains(devs, "visible="+strings.TrimPrefix(mine[0], "/dev/davinci")+"\n") {
		t.Errorf("chip container's chips %v, want exactly one, named by ASCEND_VISIBLE_DEVICES; output:\n%s", mine, devs)
	}
	info, err := npusmi.Parse([]byte("+" + table))
	if err != nil || len(info.Chips) != 1 || info.Version != standinVersion {
		t.Errorf("npu-smi info in the chip container: %v, chips %+v, version %q\n%s", err, info.Chips, info.Version, table)
	}
	code, side := waitTerminated(ctx, t, ns.Name, "workload", "side")
	if code != 0 || strings.Contains(side, "has ") || !strings.Contains(side, "visible=\n") || strings.Contains(side, "/dev/davinci") {
		t.Errorf("container without chips was injected (exit %d):\n%s", code, side)
	}
	t.Logf("workload checked after %s", time.Since(start).Round(time.Second))
}
