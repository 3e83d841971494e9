package uninstall

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/rolloutrecord"
)

// The order and the writes of a run, on a fake clientset (the API
// server's behaviour, the garbage collector and real agents stopping, is
// tested in tests/docs TestUninstallMidUpgrade).

const ns = "npu-operator"

func release(name, component string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{labelInstance: "npu-stack", labelComponent: component}}
}

func cluster() []runtime.Object {
	driverDS := &appsv1.DaemonSet{ObjectMeta: release("npu-stack-driver-910b", "driver-910b")}
	driverDS.Labels[driverPodLabel] = driverPodValue
	other := &batchv1.Job{ObjectMeta: release("other-rollout", componentRollout)}
	other.Labels[labelInstance] = "other"
	return []runtime.Object{
		&batchv1.CronJob{ObjectMeta: release("npu-stack-rollout-resume", componentResume)},
		&batchv1.Job{ObjectMeta: release("npu-stack-rollout", componentRollout)},
		&batchv1.Job{ObjectMeta: release("npu-stack-preflight", componentPreflight)},
		&batchv1.Job{ObjectMeta: release("npu-stack-uninstall", ComponentUninstall)},
		other,
		&corev1.Pod{ObjectMeta: release("npu-stack-rollout-abc", componentRollout)},
		&corev1.Pod{ObjectMeta: release("npu-stack-uninstall-xyz", ComponentUninstall)},
		&corev1.ConfigMap{ObjectMeta: release("npu-stack-rollout-record-2.0.0", rolloutrecord.Component)},
		&corev1.ConfigMap{ObjectMeta: release("npu-stack-settings", "rollout")},
		driverDS,
		&appsv1.DaemonSet{ObjectMeta: release("npu-stack-rebooter", "rebooter")},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "npu-stack-rollout", Namespace: ns}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slot-0", Namespace: ns, Labels: map[string]string{"app.kubernetes.io/component": "reboot-slot"}}},
		&corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "npu-0", ResourceVersion: "7",
				Labels:      map[string]string{k.UpgradeState(): "reboot-required", contract.LabelNPUPresent: "true"},
				Annotations: map[string]string{k.UpgradeWasCordoned(): "false"}},
			Spec: corev1.NodeSpec{Unschedulable: true},
		},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-0", Labels: map[string]string{"kubernetes.io/os": "linux"}}},
	}
}

func config(c *fake.Clientset, out *bytes.Buffer, dry bool) Config {
	return Config{Client: c, Keys: k, Namespace: ns, Release: "npu-stack", LeaseName: "npu-stack-rollout", Request: "r1", DryRun: dry, Out: out}
}

// writes are the mutating actions, "verb resource name".
func writes(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		switch a := a.(type) {
		case k8stesting.DeleteAction:
			out = append(out, "delete "+a.GetResource().Resource+" "+a.GetName())
		case k8stesting.PatchAction:
			out = append(out, "patch "+a.GetResource().Resource+" "+a.GetName())
		case k8stesting.CreateAction, k8stesting.UpdateAction:
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	return out
}

func TestDryRunChangesNothing(t *testing.T) {
	c := fake.NewClientset(cluster()...)
	var out bytes.Buffer
	r, err := Run(context.Background(), config(c, &out, true))
	if err != nil {
		t.Fatal(err)
	}
	if w := writes(c); len(w) > 0 {
		t.Errorf("a dry run wrote %q", w)
	}
	for _, want := range []string{
		"would delete CronJob npu-operator/npu-stack-rollout-resume", "would delete Job npu-operator/npu-stack-rollout",
		"would delete Lease npu-operator/npu-stack-rollout",
		"would delete ConfigMap npu-operator/npu-stack-rollout-record-2.0.0 (rollout record)",
		"would mark DaemonSet npu-operator/npu-stack-driver-910b with npu.openfuyao.com/uninstall-requested=r1",
		"would delete DaemonSet npu-operator/npu-stack-rebooter",
		"node npu-0: would remove 1 labels and 1 annotations of npu-stack; would uncordon (cordoned by the driver upgrade",
		"would delete Lease npu-operator/reboot-slot-0", "dry run finished, nothing changed",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out.String())
		}
	}
	if !slices.Equal(r.Uncordoned, []string{"npu-0"}) {
		t.Errorf("report %+v", r)
	}
}

func TestRunStopsTheRolloutBeforeTheAgentsBeforeTheNodes(t *testing.T) {
	c := fake.NewClientset(cluster()...)
	var out bytes.Buffer
	if _, err := Run(context.Background(), config(c, &out, false)); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := []string{
		"delete cronjobs npu-stack-rollout-resume",
		"delete jobs npu-stack-preflight", "delete jobs npu-stack-rollout",
		"delete pods npu-stack-rollout-abc",
		"delete leases npu-stack-rollout",
		"delete configmaps npu-stack-rollout-record-2.0.0",
		"patch daemonsets npu-stack-driver-910b", "delete daemonsets npu-stack-driver-910b", "delete daemonsets npu-stack-rebooter",
		"patch nodes npu-0",
		"delete leases reboot-slot-0",
	}
	if got := writes(c); !slices.Equal(got, want) {
		t.Errorf("writes\n%q\nwant\n%q", got, want)
	}
	n, err := c.CoreV1().Nodes().Get(context.Background(), "npu-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable || n.Labels[k.UpgradeState()] != "" || len(n.Annotations) != 0 || n.Labels[contract.LabelNPUPresent] != "true" {
		t.Errorf("node after the run: unschedulable %v labels %v annotations %v", n.Spec.Unschedulable, n.Labels, n.Annotations)
	}
	// A ConfigMap of the release that is no rollout record stays (Helm's
	// to delete).
	if _, err := c.CoreV1().ConfigMaps(ns).Get(context.Background(), "npu-stack-settings", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap npu-stack-settings: %v", err)
	}
	// The hook's own Job and pod, and another release's Job, stay.
	for _, j := range []string{"npu-stack-uninstall", "other-rollout"} {
		if _, err := c.BatchV1().Jobs(ns).Get(context.Background(), j, metav1.GetOptions{}); err != nil {
			t.Errorf("Job %s: %v", j, err)
		}
	}
	// A second run finds nothing to do.
	c.ClearActions()
	out.Reset()
	if _, err := Run(context.Background(), config(c, &out, false)); err != nil {
		t.Fatal(err)
	}
	if w := writes(c); len(w) > 0 {
		t.Errorf("a second run wrote %q", w)
	}
	if !strings.Contains(out.String(), "uninstall finished: 0 nodes cleaned") {
		t.Errorf("second run:\n%s", out.String())
	}
}

// The fleet exporter's pod (a Deployment's, running, as before helm
// uninstall deletes it after the pre-delete hook) is no node agent: the
// run neither deletes nor waits for it. Waiting for it deadlocked the
// hook, which Helm runs before it deletes the Deployment.
func TestRunDoesNotWaitForTheFleetExporter(t *testing.T) {
	exporter := &corev1.Pod{ObjectMeta: release("npu-stack-fleet-exporter-7bfd8-fhqx8", "fleet-exporter"), Spec: corev1.PodSpec{NodeName: "cpu-0"}}
	exporter.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "npu-stack-fleet-exporter-7bfd8", UID: "rs1", Controller: ptr.To(true)}}
	c := fake.NewClientset(append(cluster(), exporter)...)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Run(ctx, config(c, &out, false)); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "waiting for the node agents' pods") {
		t.Errorf("the run waited for the fleet exporter's pod:\n%s", out.String())
	}
	if _, err := c.CoreV1().Pods(ns).Get(ctx, exporter.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the fleet exporter's pod: %v (Helm's to delete, with its Deployment)", err)
	}
}

func TestDaemonSetPod(t *testing.T) {
	owned := func(kind string, controller bool) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: kind, Name: "x", Controller: ptr.To(controller)}}}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"a DaemonSet's", owned("DaemonSet", true), true},
		{"a ReplicaSet's (the fleet exporter)", owned("ReplicaSet", true), false},
		{"a Job's", owned("Job", true), false},
		{"a DaemonSet's reference that is no controller", owned("DaemonSet", false), false},
		{"no owner", &corev1.Pod{}, false},
	} {
		if got := daemonSetPod(tc.pod); got != tc.want {
			t.Errorf("%s: daemonSetPod = %v, want %v", tc.name, got, tc.want)
		}
	}
}
