// Package uninstall_test runs internal/uninstall's Run against the real
// local control plane: the order of its writes as the API server receives
// them, what a dry run leaves, what a second run finds, and the pods it
// waits for (the garbage collector and KWOK stop the agents' pods). The
// whole command on a release caught mid-upgrade is tests/docs
// TestUninstallMidUpgrade.
package uninstall_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/rolloutrecord"
	"github.com/openfuyao/npu-stack/internal/uninstall"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

var env *testbed.Env

func TestMain(m *testing.M) { os.Exit(testbed.Main(m, &env)) }

// release is one installed release's leftovers in a namespace of its own,
// its node keys under a labelDomain of its own, on two KWOK nodes.
type release struct {
	ns       string
	keys     contract.Keys
	npu, cpu string
}

const name = "npu-stack"

func meta(ns, n, component string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: n, Namespace: ns, Labels: map[string]string{
		"app.kubernetes.io/instance": name, "app.kubernetes.io/component": component}}
}

// gated is a pod spec the scheduler never places (a scheduling gate):
// such a pod is deleted at once, with no kubelet to confirm it.
func gated(restart corev1.RestartPolicy) corev1.PodSpec {
	return corev1.PodSpec{
		RestartPolicy:   restart,
		SchedulingGates: []corev1.PodSchedulingGate{{Name: "npu-stack.test/never"}},
		Containers:      []corev1.Container{{Name: "c", Image: "registry.invalid/pause:1"}},
	}
}

func podTemplate(labels map[string]string, spec corev1.PodSpec) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}
}

// newRelease creates what an uninstall meets: the rollout's hook Jobs (one
// running pod), the resume CronJob and the Lease, a rollout record and a
// ConfigMap of the release that is no record, the driver DaemonSet (no
// node matches it) and the rebooter DaemonSet with a pod on the NPU node,
// the fleet exporter's Deployment and pod, another release's Job, the
// uninstall hook's own Job and pod, a reboot-slot Lease, an NPU node that
// npu-stack cordoned mid-upgrade and a CPU node.
func newRelease(ctx context.Context, t *testing.T) release {
	t.Helper()
	ns, err := env.NewNamespace(ctx, "uninstall-run")
	if err != nil {
		t.Fatal(err)
	}
	r := release{ns: ns, keys: contract.Keys{Domain: ns + ".npu.example.com"}}
	nodes, err := env.AddNodes(ctx, 1, "un-npu", map[string]string{contract.LabelNPUPresent: "true", "npu-stack.test/release": ns, r.keys.UpgradeState(): "reboot-required"})
	if err != nil {
		t.Fatal(err)
	}
	r.npu = nodes[0]
	if nodes, err = env.AddNodes(ctx, 1, "un-cpu", nil); err != nil {
		t.Fatal(err)
	}
	r.cpu = nodes[0]
	c := env.Client
	patch := `{"spec":{"unschedulable":true},"metadata":{"annotations":{"` + r.keys.UpgradeWasCordoned() + `":"false"}}}`
	if _, err := c.CoreV1().Nodes().Patch(ctx, r.npu, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	job := func(n, component string, labels map[string]string) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: meta(ns, n, component), Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: podTemplate(nil, gated(corev1.RestartPolicyNever))}}
		for k, v := range labels {
			j.Labels[k] = v
		}
		return j
	}
	other := job("other-rollout", "rollout", map[string]string{"app.kubernetes.io/instance": "other"})
	driverLabels := map[string]string{"app": "npu-driver-daemonset", "app.kubernetes.io/instance": name, "app.kubernetes.io/component": "driver-910b"}
	driverSpec := corev1.PodSpec{NodeSelector: map[string]string{"npu-stack.test/no-such-node": "true"}, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/driver:1"}}}
	driver := &appsv1.DaemonSet{ObjectMeta: meta(ns, name+"-driver-910b", "driver-910b"), Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: driverLabels}, Template: podTemplate(driverLabels, driverSpec)}}
	driver.Labels["app"] = "npu-driver-daemonset"
	rebLabels := map[string]string{"app.kubernetes.io/instance": name, "app.kubernetes.io/component": "rebooter"}
	rebSpec := corev1.PodSpec{NodeSelector: map[string]string{"npu-stack.test/release": ns},
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers:  []corev1.Container{{Name: "c", Image: "registry.invalid/rebooter:1"}}}
	rebooter := &appsv1.DaemonSet{ObjectMeta: meta(ns, name+"-rebooter", "rebooter"), Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: rebLabels}, Template: podTemplate(rebLabels, rebSpec)}}
	expLabels := map[string]string{"app.kubernetes.io/instance": name, "app.kubernetes.io/component": "fleet-exporter"}
	exporter := &appsv1.Deployment{ObjectMeta: meta(ns, name+"-fleet-exporter", "fleet-exporter"), Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: expLabels}, Template: podTemplate(expLabels, gated(corev1.RestartPolicyAlways))}}
	cron := &batchv1.CronJob{ObjectMeta: meta(ns, name+"-rollout-resume", "rollout-resume"), Spec: batchv1.CronJobSpec{
		Schedule: "*/10 * * * *", Suspend: ptr.To(true), JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: podTemplate(nil, gated(corev1.RestartPolicyNever))}}}}

	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.BatchV1().CronJobs(ns).Create(ctx, cron, metav1.CreateOptions{}))
	for _, j := range []*batchv1.Job{job(name+"-rollout", "rollout", nil), job(name+"-preflight", "preflight", nil), job(name+"-uninstall", uninstall.ComponentUninstall, nil), other} {
		must(c.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{}))
	}
	for _, p := range []*corev1.Pod{{ObjectMeta: meta(ns, name+"-rollout-abc", "rollout"), Spec: gated(corev1.RestartPolicyNever)}, {ObjectMeta: meta(ns, name+"-uninstall-xyz", uninstall.ComponentUninstall), Spec: gated(corev1.RestartPolicyNever)}} {
		must(c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}))
	}
	must(c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta(ns, name+"-rollout-record-2.0.0", rolloutrecord.Component)}, metav1.CreateOptions{}))
	must(c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta(ns, name+"-settings", "rollout")}, metav1.CreateOptions{}))
	must(c.AppsV1().DaemonSets(ns).Create(ctx, driver, metav1.CreateOptions{}))
	must(c.AppsV1().DaemonSets(ns).Create(ctx, rebooter, metav1.CreateOptions{}))
	must(c.AppsV1().Deployments(ns).Create(ctx, exporter, metav1.CreateOptions{}))
	must(c.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name + "-rollout", Namespace: ns}}, metav1.CreateOptions{}))
	must(c.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "reboot-slot-0", Namespace: ns,
		Labels: map[string]string{"app.kubernetes.io/component": "reboot-slot"}}}, metav1.CreateOptions{}))

	// The controllers have made what a running release has: the
	// rebooter's pod running on the NPU node (KWOK runs it) and the
	// fleet exporter's pod.
	r.waitPods(ctx, t, "the rebooter's and the fleet exporter's pods", func(ps []corev1.Pod) bool {
		var reb, exp bool
		for _, p := range ps {
			reb = reb || p.Labels["app.kubernetes.io/component"] == "rebooter" && p.Status.Phase == corev1.PodRunning
			exp = exp || p.Labels["app.kubernetes.io/component"] == "fleet-exporter"
		}
		return reb && exp
	})
	return r
}

func (r release) waitPods(ctx context.Context, t *testing.T, what string, ok func([]corev1.Pod) bool) {
	t.Helper()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ps, err := env.Client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
		if err == nil && ok(ps.Items) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s in %s: %v (last list error %v)", what, r.ns, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// recorder is a client whose mutating requests the test reads back in
// the order the API server received them: "verb resource name".
type recorder struct {
	mu     sync.Mutex
	writes []string
}

func (rec *recorder) RoundTrip(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
			// .../<resource>/<name>, or .../<resource> for a create.
			entry := strings.ToLower(req.Method) + " " + strings.Join(parts[max(0, len(parts)-2):], " ")
			rec.mu.Lock()
			rec.writes = append(rec.writes, entry)
			rec.mu.Unlock()
		}
		return next.RoundTrip(req)
	})
}

func (rec *recorder) take() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	w := rec.writes
	rec.writes = nil
	return w
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (r release) config(t *testing.T, rec *recorder, out *bytes.Buffer, dry bool) uninstall.Config {
	t.Helper()
	cfg := env.Config()
	cfg.WrapTransport = rec.RoundTrip
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return uninstall.Config{Client: c, Keys: r.keys, Namespace: r.ns, Release: name, LeaseName: name + "-rollout", Request: "r1", DryRun: dry, Out: out}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestDryRunChangesNothing: the dry run sends the API server no write and
// says what the run would do.
func TestDryRunChangesNothing(t *testing.T) {
	testbed.NeedEnv(t, env)
	ctx := ctxTimeout(t, 3*time.Minute)
	r := newRelease(ctx, t)
	var rec recorder
	var out bytes.Buffer
	rep, err := uninstall.Run(ctx, r.config(t, &rec, &out, true))
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if w := rec.take(); len(w) > 0 {
		t.Errorf("a dry run wrote %q", w)
	}
	for _, want := range []string{
		"would delete CronJob " + r.ns + "/npu-stack-rollout-resume", "would delete Job " + r.ns + "/npu-stack-rollout",
		"would delete Lease " + r.ns + "/npu-stack-rollout",
		"would delete ConfigMap " + r.ns + "/npu-stack-rollout-record-2.0.0 (rollout record)",
		"would mark DaemonSet " + r.ns + "/npu-stack-driver-910b with " + r.keys.Domain + "/uninstall-requested=r1",
		"would delete DaemonSet " + r.ns + "/npu-stack-rebooter",
		"node " + r.npu + ": would remove 1 labels and 1 annotations of npu-stack; would uncordon (cordoned by the driver upgrade",
		"would delete Lease " + r.ns + "/reboot-slot-0", "dry run finished, nothing changed",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out.String())
		}
	}
	if !slices.Equal(rep.Uncordoned, []string{r.npu}) {
		t.Errorf("report %+v", rep)
	}
}

// TestRunStopsTheRolloutBeforeTheAgentsBeforeTheNodes: the API server
// receives the rollout's deletions, then the records', then the agents'
// (the driver DaemonSet marked first), then the node's patch, then the
// reboot slots'; it waits for the rebooter's pod, which the garbage
// collector and KWOK remove, and neither deletes nor waits for the fleet
// exporter's pod (Helm deletes its Deployment after the pre-delete hook:
// waiting for it deadlocked the hook). What is not the release's, or is
// the hook's own, stays; a second run writes nothing.
func TestRunStopsTheRolloutBeforeTheAgentsBeforeTheNodes(t *testing.T) {
	testbed.NeedEnv(t, env)
	ctx := ctxTimeout(t, 3*time.Minute)
	r := newRelease(ctx, t)
	var rec recorder
	var out bytes.Buffer
	if _, err := uninstall.Run(ctx, r.config(t, &rec, &out, false)); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := []string{
		"delete cronjobs npu-stack-rollout-resume",
		"delete jobs npu-stack-preflight", "delete jobs npu-stack-rollout",
		"delete pods npu-stack-rollout-abc",
		"delete leases npu-stack-rollout",
		"delete configmaps npu-stack-rollout-record-2.0.0",
		"patch daemonsets npu-stack-driver-910b", "delete daemonsets npu-stack-driver-910b", "delete daemonsets npu-stack-rebooter",
		"patch nodes " + r.npu,
		"delete leases reboot-slot-0",
	}
	if got := rec.take(); !slices.Equal(got, want) {
		t.Errorf("writes\n%q\nwant\n%q\noutput:\n%s", got, want, out.String())
	}
	if !strings.Contains(out.String(), "waiting for the node agents' pods") {
		t.Errorf("the run did not wait for the rebooter's pod:\n%s", out.String())
	}
	c := env.Client
	pods, err := c.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, p := range pods.Items {
		left = append(left, p.Labels["app.kubernetes.io/component"])
	}
	slices.Sort(left)
	if !slices.Equal(left, []string{"fleet-exporter", uninstall.ComponentUninstall}) {
		t.Errorf("pods left of components %q, want the fleet exporter's and the uninstall hook's", left)
	}
	n, err := c.CoreV1().Nodes().Get(ctx, r.npu, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k := range n.Labels {
		if strings.HasPrefix(k, r.keys.Domain+"/") {
			t.Errorf("node %s keeps label %s", r.npu, k)
		}
	}
	for k := range n.Annotations {
		if strings.HasPrefix(k, r.keys.Domain+"/") {
			t.Errorf("node %s keeps annotation %s", r.npu, k)
		}
	}
	if n.Spec.Unschedulable || n.Labels[contract.LabelNPUPresent] != "true" {
		t.Errorf("node %s after the run: unschedulable %v, labels %v", r.npu, n.Spec.Unschedulable, n.Labels)
	}
	if _, err := c.CoreV1().ConfigMaps(r.ns).Get(ctx, "npu-stack-settings", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap npu-stack-settings (Helm's to delete): %v", err)
	}
	for _, j := range []string{"npu-stack-uninstall", "other-rollout"} {
		if _, err := c.BatchV1().Jobs(r.ns).Get(ctx, j, metav1.GetOptions{}); err != nil {
			t.Errorf("Job %s: %v", j, err)
		}
	}
	if _, err := c.AppsV1().DaemonSets(r.ns).Get(ctx, "npu-stack-rebooter", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("DaemonSet npu-stack-rebooter after the run: %v", err)
	}

	out.Reset()
	if _, err := uninstall.Run(ctx, r.config(t, &rec, &out, false)); err != nil {
		t.Fatal(err)
	}
	if w := rec.take(); len(w) > 0 {
		t.Errorf("a second run wrote %q", w)
	}
	if !strings.Contains(out.String(), "uninstall finished: 0 nodes cleaned") {
		t.Errorf("second run:\n%s", out.String())
	}
}
