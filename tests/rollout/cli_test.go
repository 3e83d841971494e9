package rollout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/rollout"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// kwokFleet is a cheap fleet for read-only commands: KWOK nodes on driver
// 1.0 and a driver DaemonSet wanting 2.0, in a namespace of its own.
func kwokFleet(ctx context.Context, t *testing.T, n int) (ns string, names []string, sel string) {
	t.Helper()
	ns = namespace(t)
	names, sel = preflightFleet(ctx, t, n, testbed.NodeSpec{})
	fleet := strings.Split(sel, "=")[2]
	labels := map[string]string{"app": "npu-driver-daemonset", "app.kubernetes.io/component": "driver-910b"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "drv", Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{keys.DriverSpecVersion(): "2.0"}},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{fleetLabel: fleet, contract.LabelChip: "910b"},
					Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers:   []corev1.Container{{Name: "driver", Image: "vendor/driver:2.0"}},
				},
			},
		},
	}
	if _, err := env.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns, names, sel
}

func TestPlanAndStatusChangeNothing(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 2*time.Minute)
	ns, names, sel := kwokFleet(ctx, t, 5)
	canaryPatch := `{"metadata":{"labels":{"canary":"yes"}}}`
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, names[3], types.MergePatchType, []byte(canaryPatch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	skipPatch := `{"metadata":{"labels":{"` + keys.UpgradeSkip() + `":"true"}}}`
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, names[4], types.MergePatchType, []byte(skipPatch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	before, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	common := []string{"--namespace=" + ns, "--npu-node-selector=" + sel, "--driver-selector=app=npu-driver-daemonset"}

	r := hooks(ctx, t, append([]string{"plan", "--max-parallel-upgrades=2", "--max-unavailable=100%", "--canary-selector=canary=yes", "-o", "json"}, common...)...)
	if r.code != 0 {
		t.Fatalf("plan: %s", r)
	}
	var plan []rollout.PlanEntry
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, r.stdout)
	}
	var order []string
	for _, e := range plan {
		if e.Order > 0 {
			order = append(order, e.Node)
		}
	}
	wantOrder := []string{names[3], names[0], names[1], names[2]}
	if strings.Join(order, ",") != strings.Join(wantOrder, ",") {
		t.Errorf("plan order %v, want canary first then by name %v", order, wantOrder)
	}
	if last := plan[len(plan)-1]; last.Node != names[4] || !strings.Contains(last.Note, "skip label") {
		t.Errorf("skipped node must be listed with its reason: %+v", last)
	}
	table := hooks(ctx, t, append([]string{"plan"}, common...)...)
	if table.code != 0 || !strings.Contains(table.stdout, "ORDER") || !strings.Contains(table.stdout, "skipped: skip label set") {
		t.Errorf("plan table: %s", table)
	}

	st := hooks(ctx, t, append([]string{"status", "-o", "json"}, common...)...)
	if st.code != 0 {
		t.Fatalf("status: %s", st)
	}
	var status rollout.Status
	if err := json.Unmarshal([]byte(st.stdout), &status); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, st.stdout)
	}
	if len(status.Nodes) != 5 || status.Progress.Total != 5 {
		t.Fatalf("status lists %d nodes (progress %+v), want 5", len(status.Nodes), status.Progress)
	}
	for _, row := range status.Nodes {
		if row.Loaded != "1.0" || row.Desired != "2.0" || row.State != "out-of-date" {
			t.Errorf("status row %+v: want loaded 1.0, desired 2.0, out-of-date", row)
		}
	}
	text := hooks(ctx, t, append([]string{"status"}, common...)...)
	if text.code != 0 || !strings.Contains(text.stdout, "NODE") || !strings.Contains(text.stdout, "progress: 0/5 nodes up to date") {
		t.Errorf("status table: %s", text)
	}

	after, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	for i := range before.Items {
		b, a := before.Items[i], after.Items[i]
		if a.Labels[keys.UpgradeState()] != "" || a.Spec.Unschedulable != b.Spec.Unschedulable {
			t.Errorf("%s changed by plan/status: state %q unschedulable %t", a.Name, a.Labels[keys.UpgradeState()], a.Spec.Unschedulable)
		}
	}
}

// TestPlanUsesTheChartsPolicy: without policy flags, plan and status read
// them from the chart's rollout Job, so they tell the plan the rollout
// will really follow.
func TestPlanUsesTheChartsPolicy(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 2*time.Minute)
	ns, names, sel := kwokFleet(ctx, t, 4)
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, names[2], types.MergePatchType, []byte(`{"metadata":{"labels":{"canary":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "npu-stack-rollout", Namespace: ns, Labels: map[string]string{"app.kubernetes.io/component": "rollout"}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "rollout", Image: "npu-hooks", Args: []string{"rollout", "--namespace=" + ns,
				"--npu-node-selector=" + sel, "--driver-selector=app=npu-driver-daemonset", "--max-parallel-upgrades=3",
				"--max-unavailable=100%", "--canary-selector=canary=yes", "--reroll=" + ns + "/missing-plugin"}}}}}},
	}
	if _, err := env.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := hooks(ctx, t, "plan", "--namespace="+ns, "-o", "json")
	if r.code != 0 {
		t.Fatalf("plan: %s", r)
	}
	var plan []rollout.PlanEntry
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, r.stdout)
	}
	var got []string
	for _, e := range plan {
		got = append(got, fmt.Sprintf("%s@%d", e.Node, e.Wave))
	}
	want := []string{names[2] + "@1", names[0] + "@2", names[1] + "@2", names[3] + "@2"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("plan with the chart's policy (canary first, 3 at once, only this fleet): %v, want %v", got, want)
	}
	// A flag given by hand still wins.
	r = hooks(ctx, t, "plan", "--namespace="+ns, "-o", "json", "--max-parallel-upgrades=1")
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil || r.code != 0 {
		t.Fatalf("plan: %v %s", err, r)
	}
	if plan[len(plan)-1].Wave != 4 {
		t.Fatalf("with --max-parallel-upgrades=1 the last node is in wave 4: %+v", plan)
	}
}

func TestSecondRolloutWaitsOrExitsOnTheLease(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 2*time.Minute)
	ns, _, sel := kwokFleet(ctx, t, 2)
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "npu-stack-rollout", Namespace: ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("rollout-pod-abc"), LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime: &now, RenewTime: &now},
	}
	if _, err := env.Client.CoordinationV1().Leases(ns).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	common := []string{"rollout", "--namespace=" + ns, "--npu-node-selector=" + sel, "--lease-identity=me"}
	r := hooks(ctx, t, append(common, "--wait-for-lease=false")...)
	if r.code != 2 || !strings.Contains(r.stderr, `held by "rollout-pod-abc"`) || !strings.Contains(r.stderr, ns+"/npu-stack-rollout") {
		t.Fatalf("with the lease held and --wait-for-lease=false: want exit 2 naming the holder and the lease, got %s", r)
	}
	if r := hooks(ctx, t, append(common, "--resume")...); r.code != 0 || !strings.Contains(r.stderr, "nothing to resume") {
		t.Fatalf("--resume with another rollout running must exit 0: %s", r)
	}
	short, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	r = hooks(short, t, common...)
	if r.code == 0 || !strings.Contains(r.stderr, "another rollout holds lease") {
		t.Fatalf("by default a second rollout waits for the lease (and says so): %s", r)
	}
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if s := n.Labels[keys.UpgradeState()]; s != "" {
			t.Errorf("%s: a rollout without the lease wrote state %q", n.Name, s)
		}
	}
}

func TestRolloutRejectsBadArguments(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, time.Minute)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollout", "--max-writes-in-flight=0"}, "--max-writes-in-flight 0: must be at least 1"},
		{[]string{"rollout", "--max-unavailable=lots"}, "--max-unavailable"},
	} {
		wantBadArguments(ctx, t, tc.args, tc.want)
	}
}
