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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/openfuyao/npu-stack/internal/npusmi"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/standin"
)

// TestRealNodeInjectsDriverIntoChipContainers installs the chart (cdi.inject
// is the default) on a real 910B node (containerd 2.4 with its default
// NRI) and, in a namespace enforcing Pod Security "baseline":
//   - runs docs/installation.md's workload as written (image aside): with
//     no volume and no env, npu-smi in it reports the installed driver and
//     its one chip;
//   - runs a pod whose container requesting a chip sees only its allocated
//     /dev/davinciN and whose other container gets neither the driver nor
//     npu-smi;
//   - stops the NRI injector: the device plugin goes and the node
//     advertises no chip, so a new pod requesting one stays unscheduled
//     rather than start without its libraries; once the injector is back,
//     that pod runs with them.
func TestRealNodeInjectsDriverIntoChipContainers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	b, _ := startBed(ctx, t, bedSpec{prefix: "inject", os: "ubuntu22.04", image: func(u *standin.UserSpace, _ string) (v1.ImageIndex, error) { return u.DriverImage() }})
	b.installChart(ctx, b.images[standinVersion])
	res := corev1.ResourceName(standin.NewChips(standin.Model910B, bedChips).ResourceName())
	// The device plugin waits for the injector: chips advertised means the
	// injector is registered with containerd.
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

	// The documented workload, as written but for its image (the
	// documented one is not in the test bed's registry), namespace and
	// node.
	doc, err := testbed.DocumentedWorkload()
	if err != nil {
		t.Fatal(err)
	}
	doc.Namespace, doc.Labels = ns.Name, map[string]string{"app": doc.Name}
	doc.Spec.NodeSelector = map[string]string{corev1.LabelHostname: b.node.Name()}
	doc.Spec.Containers[0].Image = image
	if _, err := env.Client.CoreV1().Pods(ns.Name).Create(ctx, doc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the documented workload: %v", err)
	}
	code, logs := waitTerminated(ctx, t, ns.Name, doc.Name, doc.Spec.Containers[0].Name)
	if info, err := npusmi.Parse([]byte(logs)); code != 0 || err != nil || len(info.Chips) != 1 || info.Version != standinVersion {
		logPods(t, ns.Name)
		t.Fatalf("the documented workload: exit %d, npu-smi info %v (chips %+v, version %q), log:\n%s", code, err, info.Chips, info.Version, logs)
	}

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
	code, logs = waitTerminated(ctx, t, ns.Name, "workload", "train")
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
	t.Logf("workloads checked after %s", time.Since(start).Round(time.Second))

	stopInjector(ctx, t, b, res)
	t.Logf("injector stopped, no chip advertised after %s", time.Since(start).Round(time.Second))
	late := doc.DeepCopy()
	late.Name, late.Labels, late.ResourceVersion = "late", map[string]string{"app": "late"}, ""
	if _, err := env.Client.CoreV1().Pods(ns.Name).Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Unschedulable is the scheduler's word that no node has the chip:
	// the pod cannot start, with or without its libraries.
	err = testbed.WaitFor(ctx, testbed.PodsLW(env.Client, ns.Name, "app=late"), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				return false, fmt.Errorf("pod late was bound to %s while the injector was stopped", p.Spec.NodeName)
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("a pod requesting a chip while the injector is stopped: %v", err)
	}
	restartInjector(ctx, t, b)
	code, logs = waitTerminated(ctx, t, ns.Name, "late", late.Spec.Containers[0].Name)
	if info, err := npusmi.Parse([]byte(logs)); code != 0 || err != nil || info.Version != standinVersion {
		t.Fatalf("pod late after the injector came back: exit %d, npu-smi info %v, log:\n%s", code, err, logs)
	}
	t.Logf("injector back, the waiting pod ran with its driver after %s", time.Since(start).Round(time.Second))
}

// injectorDS is the name of the bed's NRI injector DaemonSet.
func injectorDS(ctx context.Context, t *testing.T, b *installBed) string {
	t.Helper()
	dss, err := env.Client.AppsV1().DaemonSets(b.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=nri-injector"})
	if err != nil || len(dss.Items) != 1 {
		t.Fatalf("the injector's DaemonSet: %v (%d found)", err, len(dss.Items))
	}
	return dss.Items[0].Name
}

// stopInjector takes the injector off the node (a node selector nothing
// matches, so its pod is deleted) and waits until the node advertises no
// chip: the device plugin's liveness probe failed and the kubelet
// restarted it, and it waits for the injector.
func stopInjector(ctx context.Context, t *testing.T, b *installBed, res corev1.ResourceName) {
	t.Helper()
	patch := []byte(`{"spec":{"template":{"spec":{"nodeSelector":{"npu-stack.test/injector":"stopped"}}}}}`)
	if _, err := env.Client.AppsV1().DaemonSets(b.ns).Patch(ctx, injectorDS(ctx, t, b), types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testbed.WaitNode(ctx, t, env.Client, b.node.Name(), fmt.Sprintf("allocatable %s = 0", res), allocatable(res, 0))
}

// restartInjector puts the injector back on the node.
func restartInjector(ctx context.Context, t *testing.T, b *installBed) {
	t.Helper()
	patch := []byte(`{"spec":{"template":{"spec":{"nodeSelector":{"npu-stack.test/injector":null}}}}}`)
	if _, err := env.Client.AppsV1().DaemonSets(b.ns).Patch(ctx, injectorDS(ctx, t, b), types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
