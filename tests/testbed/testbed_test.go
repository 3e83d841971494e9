package testbed_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/procnode"
)

var env *testbed.Env

func TestMain(m *testing.M) { os.Exit(testbed.Main(m, &env, testbed.BuildEngines)) }

func namespace(t *testing.T) string {
	t.Helper()
	base := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(base) > 50 {
		base = base[:50]
	}
	ctx := context.Background()
	// A generated name keeps reruns (-count=N) in one cluster apart.
	ns, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: base + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	name := ns.Name
	// Pods need the namespace's default service account, which the
	// controller manager creates asynchronously.
	err = testbed.WaitFor(ctxTimeout(t, time.Minute), cache.NewListWatchFromClient(env.Client.CoreV1().RESTClient(), "serviceaccounts", name, fields.Everything()),
		&corev1.ServiceAccount{}, func(sas []*corev1.ServiceAccount) (bool, error) {
			for _, sa := range sas {
				if sa.Name == "default" {
					return true, nil
				}
			}
			return false, nil
		})
	if err != nil {
		t.Fatalf("default service account in %s: %v", name, err)
	}
	return name
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestDaemonSetRunsOnExactlyTheNPUNodes(t *testing.T) {
	ctx := ctxTimeout(t, 2*time.Minute)
	ns := namespace(t)
	if _, err := env.AddNPUNodes(ctx, 3, testbed.NodeSpec{Prefix: "ds-npu"}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.AddNodes(ctx, 2, "ds-cpu", map[string]string{"node-role.example/cpu": "true"}); err != nil {
		t.Fatal(err)
	}
	npuNodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: contract.LabelNPUPresent + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range npuNodes.Items {
		want = append(want, n.Name)
	}
	sort.Strings(want)
	if len(want) < 3 {
		t.Fatalf("expected at least the 3 new NPU nodes, found %v", want)
	}

	sel := map[string]string{"app": "npu-probe"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "npu-probe", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{contract.LabelNPUPresent: "true"},
					Containers:   []corev1.Container{{Name: "probe", Image: env.Product.PauseImage}},
				},
			},
		},
	}
	if _, err := env.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got []string
	err = testbed.WaitFor(ctx, testbed.PodsLW(env.Client, ns, labels.SelectorFromSet(sel).String()), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		got = got[:0]
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning {
				got = append(got, p.Spec.NodeName)
			}
		}
		sort.Strings(got)
		return fmt.Sprint(got) == fmt.Sprint(want), nil
	})
	if err != nil {
		t.Fatalf("DaemonSet pods Running on %v, want exactly the NPU nodes %v: %v", got, want, err)
	}
}

// processNode returns a process-backed node shared by the tests below.
func processNode(t *testing.T) *procnode.Node {
	t.Helper()
	if n, ok := env.ProcessNode("proc-0"); ok {
		return n
	}
	nodes, err := env.AddProcessNodes(ctxTimeout(t, time.Minute), 1, testbed.NodeSpec{Prefix: "proc", Driver: "25.3.0"})
	if err != nil {
		t.Fatal(err)
	}
	return nodes[0]
}

func runJob(t *testing.T, ns, name string, node *procnode.Node, args ...string) (*batchv1.Job, *corev1.Pod) {
	t.Helper()
	ctx := ctxTimeout(t, 2*time.Minute)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				NodeSelector:  map[string]string{corev1.LabelHostname: node.Name()},
				Containers: []corev1.Container{{
					Name:  "hooks",
					Image: env.Product.Images["npu-hooks"],
					Args:  args,
				}},
			}},
		},
	}
	if _, err := env.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var final *batchv1.Job
	err := testbed.WaitFor(ctx, testbed.JobLW(env.Client, ns, name), &batchv1.Job{}, func(jobs []*batchv1.Job) (bool, error) {
		for _, j := range jobs {
			if testbed.JobFinished(j) != "" {
				final = j
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("job %s did not finish: %v\nlogs:\n%s", name, err, node.Logs(ns, name, "hooks"))
	}
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of job %s: %v (%d)", name, err, len(pods.Items))
	}
	return final, &pods.Items[0]
}

func TestJobRunsProductBinaryAsProcess(t *testing.T) {
	ns := namespace(t)
	node := processNode(t)

	job, pod := runJob(t, ns, "version", node, "--version")
	if got := testbed.JobFinished(job); got != batchv1.JobComplete {
		t.Fatalf("job running `npu-hooks --version` finished %q, want Complete; logs:\n%s", got, node.Logs(ns, pod.Name, "hooks"))
	}
	if logs := node.Logs(ns, pod.Name, "hooks"); !strings.Contains(logs, "npu-hooks version") {
		t.Fatalf("the process did not print its version; logs: %q", logs)
	}
	if term := pod.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 0 {
		t.Fatalf("container state %+v, want terminated with exit code 0", pod.Status.ContainerStatuses[0].State)
	}
	// Through the API server, as `kubectl logs` and Helm's hook output do.
	viaAPI, err := env.Client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "hooks"}).DoRaw(context.Background())
	if err != nil || !strings.Contains(string(viaAPI), "npu-hooks version") {
		t.Fatalf("pod log through the API server: %q, %v", viaAPI, err)
	}

	job, pod = runJob(t, ns, "bad-flag", node, "--no-such-flag")
	if got := testbed.JobFinished(job); got != batchv1.JobFailed {
		t.Fatalf("job whose process exits 1 finished %q, want Failed", got)
	}
	if term := pod.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 1 {
		t.Fatalf("container state %+v, want terminated with exit code 1", pod.Status.ContainerStatuses[0].State)
	}
	if logs := node.Logs(ns, pod.Name, "hooks"); !strings.Contains(logs, "unknown flag: --no-such-flag") {
		t.Fatalf("the process did not report the bad flag; logs: %q", logs)
	}
}

func TestProcessNodeRebootRestartsPods(t *testing.T) {
	ctx := ctxTimeout(t, 2*time.Minute)
	ns := namespace(t)
	node := processNode(t)
	before, err := env.Client.CoreV1().Nodes().Get(ctx, node.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:   node.Name(),
			Containers: []corev1.Container{{Name: "agent", Image: env.Product.PauseImage}},
		},
	}
	if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := func(restarts int32) func([]*corev1.Pod) (bool, error) {
		return func(pods []*corev1.Pod) (bool, error) {
			for _, p := range pods {
				if p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 &&
					p.Status.ContainerStatuses[0].RestartCount == restarts && p.Status.ContainerStatuses[0].State.Running != nil {
					return true, nil
				}
			}
			return false, nil
		}
	}
	if err := testbed.WaitFor(ctx, testbed.PodsLW(env.Client, ns, ""), &corev1.Pod{}, running(0)); err != nil {
		t.Fatalf("pod never ran: %v", err)
	}

	h := node.Host()
	if err := h.Reboot(ctx, host.RebootSystemd); err != nil {
		t.Fatal(err)
	}
	if err := testbed.WaitFor(ctx, testbed.PodsLW(env.Client, ns, ""), &corev1.Pod{}, running(1)); err != nil {
		t.Fatalf("pod was not restarted by the reboot: %v", err)
	}
	after, err := env.Client.CoreV1().Nodes().Get(ctx, node.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := h.State()
	if err != nil {
		t.Fatal(err)
	}
	if after.Status.NodeInfo.BootID == before.Status.NodeInfo.BootID || after.Status.NodeInfo.BootID != st.BootID {
		t.Fatalf("node boot ID %q (before %q, host %q): want the host's new boot ID", after.Status.NodeInfo.BootID, before.Status.NodeInfo.BootID, st.BootID)
	}
	// The boot loads the installed driver, as a real host loads the
	// modules the installer left.
	if st.LoadedDriver != st.InstalledDriver || st.RebootRequest != "" {
		t.Fatalf("after reboot: driver %q loaded (%q installed), request %q pending; want the installed one loaded, none pending", st.LoadedDriver, st.InstalledDriver, st.RebootRequest)
	}
	if st.Reboots < 1 {
		t.Fatalf("host counted %d reboots", st.Reboots)
	}
}
