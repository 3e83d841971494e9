// Package realnode_test runs pods on a real node of the test bed: the
// upstream kubelet, containerd and runc in the node's own namespaces
// (tests/testbed/realnode), joined to the test bed's control plane. What
// procnode cannot enforce — the image's user, a hostPath's permissions —
// is enforced here by the same components as on a user's node.
package realnode_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/realnode"
)

var env *testbed.Env

func TestMain(m *testing.M) { os.Exit(testbed.Main(m, &env, testbed.BuildNodes)) }

// probeDir is a root-owned directory (0755) on the node, the hostPath the
// probe's containers write into.
const probeDir = "/var/lib/npu-stack-probe"

// TestRealNodeEnforcesImageUserOnHostPath starts a real node, runs a
// DaemonSet whose pod has two containers of one image (user 65532): one
// as the image's user, one with runAsUser 0. Both write into a root-owned
// hostPath directory; the kernel refuses the first and lets the second
// through. crictl on the node lists both containers, the pod's
// service-account token carries the node claim, and stopping the node
// leaves nothing behind.
func TestRealNodeEnforcesImageUserOnHostPath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	start := time.Now()
	node, err := env.AddRealNode(ctx, testbed.NodeSpec{Prefix: "real", CPU: true})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, node, "containerd", "kubelet")
		}
		if !stopped {
			_ = node.Stop()
		}
	})
	testbed.WaitNode(ctx, t, env.Client, node.Name(), "Ready", nodeReady)
	t.Logf("node %s Ready %s after start (kubelet log %s)", node.Name(), time.Since(start).Round(time.Second), node.LogPath("kubelet"))

	image := pushProbeImage(ctx, t)
	if err := os.MkdirAll(node.Path(probeDir), 0o755); err != nil {
		t.Fatal(err)
	}
	ns, err := env.NewNamespace(ctx, "realnode")
	if err != nil {
		t.Fatal(err)
	}
	ds := probeDaemonSet(image, node.Name())
	if _, err := env.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := waitProbeRunning(ctx, t, ns)

	// A container is Running before its process has printed: poll its
	// log (a log has nothing to watch) until its one line is there.
	logs := map[string]string{}
	for _, c := range []string{"image-user", "root"} {
		var lastErr error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			b, err := env.Client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: c}).DoRaw(ctx)
			lastErr = err
			logs[c] = strings.TrimSpace(string(b))
			return err == nil && strings.HasSuffix(string(b), "\n"), nil
		})
		if err != nil {
			t.Fatalf("logs of %s/%s through the API server and the node's kubelet: %v (last: %v, %q)", pod.Name, c, err, lastErr, logs[c])
		}
	}
	if want := "uid=65532 write /probe/image-user: open /probe/image-user: permission denied"; logs["image-user"] != want {
		t.Errorf("container as the image's user: log %q, want %q", logs["image-user"], want)
	}
	if want := "uid=0 write /probe/root: ok"; logs["root"] != want {
		t.Errorf("container with runAsUser 0: log %q, want %q", logs["root"], want)
	}
	if _, err := os.Stat(node.Path(probeDir + "/root")); err != nil {
		t.Errorf("the root container's file on the node: %v", err)
	}
	if _, err := os.Stat(node.Path(probeDir + "/image-user")); !os.IsNotExist(err) {
		t.Errorf("the image user's file exists on the node (stat: %v)", err)
	}

	checkCrictl(ctx, t, node, pod.Name)
	checkTokenNodeClaim(t, node, pod)

	stopped = true
	stopClean(t, node)
	t.Logf("test wall time %s", time.Since(start).Round(time.Second))
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func probeDaemonSet(image, nodeName string) *appsv1.DaemonSet {
	labels := map[string]string{"app": "writeprobe"}
	container := func(name string, sc *corev1.SecurityContext) corev1.Container {
		return corev1.Container{
			Name:            name,
			Image:           image,
			Args:            []string{"/probe/" + name},
			SecurityContext: sc,
			VolumeMounts:    []corev1.VolumeMount{{Name: "probe", MountPath: "/probe"}},
		}
	}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "writeprobe"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{corev1.LabelHostname: nodeName, testbed.RealNodeLabel: "true"},
					Containers: []corev1.Container{
						container("image-user", nil),
						container("root", &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}),
					},
					Volumes: []corev1.Volume{{Name: "probe", VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: probeDir, Type: ptr.To(corev1.HostPathDirectory)},
					}}},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
				},
			},
		},
	}
}

func waitProbeRunning(ctx context.Context, t *testing.T, ns string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	var last string
	err := testbed.WaitFor(ctx, testbed.PodsLW(env.Client, ns, "app=writeprobe"), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			last = p.Name + " " + string(p.Status.Phase)
			for _, cs := range p.Status.ContainerStatuses {
				if w := cs.State.Waiting; w != nil {
					last += " " + cs.Name + ": " + w.Reason + " " + w.Message
				}
			}
			ready := len(p.Status.ContainerStatuses) == 2
			for _, cs := range p.Status.ContainerStatuses {
				ready = ready && cs.State.Running != nil
			}
			if p.Status.Phase == corev1.PodRunning && ready {
				pod = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("writeprobe pod running: %v (last: %s)", err, last)
	}
	return pod
}

// checkCrictl lists the node's containers with crictl, as a user on the
// node would.
func checkCrictl(ctx context.Context, t *testing.T, node *realnode.Node, podName string) {
	t.Helper()
	out, err := node.Crictl(ctx, "ps", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Containers []struct {
			Metadata struct{ Name string } `json:"metadata"`
			State    string                `json:"state"`
			Labels   map[string]string     `json:"labels"`
		} `json:"containers"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("crictl ps -o json: %v\n%s", err, out)
	}
	running := map[string]bool{}
	for _, c := range list.Containers {
		if c.Labels["io.kubernetes.pod.name"] == podName && c.State == "CONTAINER_RUNNING" {
			running[c.Metadata.Name] = true
		}
	}
	if !running["image-user"] || !running["root"] {
		t.Errorf("crictl ps on %s: running containers of %s %v, want image-user and root\n%s", node.Name(), podName, running, out)
	}
	table, _ := node.Crictl(ctx, "ps")
	t.Logf("crictl ps on %s:\n%s", node.Name(), table)
}

// checkTokenNodeClaim reads the pod's projected service-account token on
// the node and checks its node claim: what the chart's admission policy
// keys on.
func checkTokenNodeClaim(t *testing.T, node *realnode.Node, pod *corev1.Pod) {
	t.Helper()
	tokens, err := filepath.Glob(node.Path("/var/lib/kubelet/pods/" + string(pod.UID) + "/volumes/kubernetes.io~projected/*/token"))
	if err != nil || len(tokens) == 0 {
		t.Fatalf("pod %s's projected token on the node: %v (found %v)", pod.Name, err, tokens)
	}
	jwt, err := os.ReadFile(tokens[0])
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(string(jwt), ".")
	if len(parts) != 3 {
		t.Fatalf("token %s: not a JWT", tokens[0])
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("token payload: %v", err)
	}
	var claims struct {
		K8s struct {
			Node struct{ Name string } `json:"node"`
			Pod  struct{ Name string } `json:"pod"`
		} `json:"kubernetes.io"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatalf("token claims: %v", err)
	}
	if claims.K8s.Node.Name != node.Name() || claims.K8s.Pod.Name != pod.Name {
		t.Errorf("token claims node %q pod %q, want node %q pod %q", claims.K8s.Node.Name, claims.K8s.Pod.Name, node.Name(), pod.Name)
	}
}
