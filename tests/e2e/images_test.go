package e2e_test

import (
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestMissingDriverImageIsRefusedBeforeAnyCordon: an upgrade to a driver
// version nobody copied into the registry (seed Step 1.1 skipped) is
// refused by the preflight hook, which asks the real registry, before
// anything is cordoned; had it gone on, the new driver pods would sit in
// ImagePullBackOff.
func TestMissingDriverImageIsRefusedBeforeAnyCordon(t *testing.T) {
	t.Parallel() // its own namespace, release and nodes: see main_test.go
	ctx := ctxTimeout(t, 10*time.Minute)
	s := newStack(t, "", "", 2, 0)
	if _, err := s.helm.Install(ctx, s.release, s.vals, testbed.InstallOptions{}); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	s.check(ctx, v1, 0)

	const missing = "25.9.9"
	s.setVersion(missing)
	var hookLog strings.Builder
	_, err := s.helm.Upgrade(ctx, s.release, s.vals, testbed.InstallOptions{NoDriverMirror: true, Timeout: 3 * time.Minute, HookOutput: &hookLog})
	if err == nil {
		t.Fatal("helm upgrade to a driver version whose image is not in the registry must fail in preflight")
	}
	ref := env.Registry.Host + "/alaudadockerhub/ascend-driver:" + missing + "-910b-"
	for _, want := range []string{"profile/910b", ref, "not in the registry", "skopeo copy --all docker://docker.io/alaudadockerhub/ascend-driver:" + missing + "-910b-"} {
		if !strings.Contains(err.Error()+hookLog.String(), want) {
			t.Errorf("the refusal must name %q:\nerror: %v\nhook log:\n%s", want, err, hookLog.String())
		}
	}
	st, err := s.helm.Status(s.release)
	if err != nil {
		t.Fatal(err)
	}
	if st.Info.Status != release.StatusFailed {
		t.Errorf("release %s after the refused upgrade, want failed", st.Info.Status)
	}
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: s.selector()})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable || n.Labels["npu.openfuyao.com/driver-upgrade-state"] != "" {
			t.Errorf("node %s touched by a refused upgrade: unschedulable=%v state=%q", n.Name, n.Spec.Unschedulable, n.Labels["npu.openfuyao.com/driver-upgrade-state"])
		}
	}
	pods, err := env.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=npu-driver-daemonset"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			if strings.Contains(c.Image, missing) {
				t.Errorf("pod %s runs the missing image %s: the pre-upgrade hook must stop Helm before the DaemonSet changes", p.Name, c.Image)
			}
		}
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("driver pod %s is %s after the refused upgrade", p.Name, p.Status.Phase)
		}
	}
}
