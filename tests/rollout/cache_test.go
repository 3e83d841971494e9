package rollout_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/rollout"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestRolloutCachesOnlyWhatItReads (issue 19): the rollout's caches hold
// the pods and DaemonSets its node views read — the driver and re-roll
// DaemonSets and their pods, NPU workloads, the pods it waits for — and
// not the ordinary pods on the NPU nodes, the pods of other nodes or
// other DaemonSets; the node view built from them is what it was.
func TestRolloutCachesOnlyWhatItReads(t *testing.T) {
	ctx := ctxTimeout(t, 3*time.Minute)
	ns, other := namespace(t), namespace(t)
	both := map[string]string{fleetLabel + "-any": ns}
	npuNodes, err := env.AddNodes(ctx, 1, "cache-npu", map[string]string{contract.LabelNPUPresent: "true", fleetLabel: ns, fleetLabel + "-any": ns})
	if err != nil {
		t.Fatal(err)
	}
	cpuNodes, err := env.AddNodes(ctx, 1, "cache-cpu", both)
	if err != nil {
		t.Fatal(err)
	}
	npuNode, cpuNode := npuNodes[0], cpuNodes[0]
	// KWOK nodes take any pod and run nothing: a later test's Job pod
	// (the resume CronJob's) placed on this one would never run.
	t.Cleanup(func() {
		for _, n := range []string{npuNode, cpuNode} {
			if err := env.Client.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil {
				t.Logf("cleanup: delete KWOK node %s: %v", n, err)
			}
		}
	})

	onNPU := map[string]string{fleetLabel: ns}
	daemonSets := []*appsv1.DaemonSet{
		daemonSet(ns, "driver", map[string]string{"app": "npu-driver-daemonset"}, onNPU),
		daemonSet(ns, "plugin", nil, onNPU),   // a re-roll target by name
		daemonSet(other, "logger", nil, both), // someone else's, on both nodes
	}
	for _, ds := range daemonSets {
		if _, err := env.Client.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	npu := corev1.ResourceList{"huawei.com/Ascend910": resource.MustParse("1")}
	barePods := []*corev1.Pod{
		barePod(other, "train", npuNode, npu, nil),
		barePod(other, "batch", npuNode, nil, map[string]string{"batch": "yes"}),
		barePod(other, "web", npuNode, nil, nil),
		barePod(other, "cpu-web", cpuNode, nil, nil),
	}
	for _, p := range barePods {
		if _, err := env.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Client.AppsV1().ReplicaSets(other).Create(ctx, ordinaryReplicaSet(other, "cache", npuNode, nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every pod bound: the DaemonSets' on their nodes, the ReplicaSet's.
	var all []string
	for _, namespace := range []string{ns, other} {
		err := testbed.WaitFor(ctx, testbed.PodsLW(env.Client, namespace, ""), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
			want := 2 // the driver's and the plugin's on the NPU node
			if namespace == other {
				want = len(barePods) + 1 + 2 // the ReplicaSet's, logger's on both nodes
			}
			bound := 0
			for _, p := range pods {
				if p.Spec.NodeName != "" {
					bound++
				}
			}
			return bound == want, nil
		})
		if err != nil {
			t.Fatalf("pods of %s: %v", namespace, err)
		}
		ps, err := env.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps.Items {
			all = append(all, p.Namespace+"/"+p.Name+" on "+p.Spec.NodeName+" owned by "+owner(&p))
		}
	}

	wait, err := labels.Parse("batch=yes")
	if err != nil {
		t.Fatal(err)
	}
	target, err := rollout.ParseTarget(ns + "/plugin")
	if err != nil {
		t.Fatal(err)
	}
	c := rollout.NewController(rollout.Config{
		Client: env.Client, Log: logrus.New(), Keys: keys, Namespace: ns,
		NodeSelector:   labels.SelectorFromSet(onNPU),
		DriverSelector: labels.SelectorFromSet(labels.Set{"app": "npu-driver-daemonset"}),
		Targets:        []rollout.TargetSpec{target},
		Policy:         rollout.Policy{WaitForCompletion: rollout.WaitPolicy{Selector: wait}},
	})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cachedPods, cachedSets := c.CachedKeys()
	var mine []string // the cached pods of this test's namespaces
	for _, k := range cachedPods {
		if strings.HasPrefix(k, ns+"/") || strings.HasPrefix(k, other+"/") {
			mine = append(mine, k)
		}
	}
	slices.Sort(mine)
	var wantPods []string
	for _, line := range all {
		key, _, _ := strings.Cut(line, " on ")
		if strings.HasPrefix(key, ns+"/driver-") || strings.HasPrefix(key, ns+"/plugin-") || key == other+"/train" || key == other+"/batch" {
			wantPods = append(wantPods, key)
		}
	}
	slices.Sort(wantPods)
	if !slices.Equal(mine, wantPods) {
		t.Errorf("pods cached %q, want %q, of\n%s", mine, wantPods, strings.Join(all, "\n"))
	}
	var mySets []string
	for _, k := range cachedSets {
		if strings.HasPrefix(k, ns+"/") || strings.HasPrefix(k, other+"/") {
			mySets = append(mySets, k)
		}
	}
	slices.Sort(mySets)
	if want := []string{ns + "/driver", ns + "/plugin"}; !slices.Equal(mySets, want) {
		t.Errorf("DaemonSets cached %q, want %q", mySets, want)
	}

	s, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Nodes) != 1 {
		t.Fatalf("snapshot of %d nodes, want the NPU node %s: %+v", len(s.Nodes), npuNode, s.Nodes)
	}
	n := s.Nodes[0]
	if n.Driver == nil || n.NPUPods != 1 || n.WaitPods != 1 || len(n.TargetPods[target.String()]) != 1 {
		t.Errorf("node view from the caches: driver %+v, %d NPU pods (want 1), %d pods waited for (want 1), target pods %v (want 1)",
			n.Driver, n.NPUPods, n.WaitPods, n.TargetPods)
	}
}

func daemonSet(ns, name string, l, nodeSelector map[string]string) *appsv1.DaemonSet {
	sel := map[string]string{"ds": name}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel, Annotations: map[string]string{keys.DriverSpecVersion(): oldVersion}},
				Spec: corev1.PodSpec{NodeSelector: nodeSelector, Containers: []corev1.Container{{Name: name, Image: env.Product.PauseImage}},
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
			},
		},
	}
}

func barePod(ns, name, node string, limits corev1.ResourceList, l map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: name, Image: env.Product.PauseImage,
			Resources: corev1.ResourceRequirements{Limits: limits}}}, TerminationGracePeriodSeconds: ptr.To[int64](0)},
	}
}

func owner(p *corev1.Pod) string {
	if ref := metav1.GetControllerOf(p); ref != nil {
		return ref.Kind + "/" + ref.Name
	}
	return "nobody"
}
