package e2e_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestRolloutJobSurvivesControllerManagerOutage: with
// kube-controller-manager down for 60 s in the middle of a rollout, the
// rollout hook Job's pod, killed meanwhile, is not recreated (nobody runs
// the Job controller); once it is back, the Job's retry finishes the
// rollout from the nodes' state and helm upgrade succeeds.
func TestRolloutJobSurvivesControllerManagerOutage(t *testing.T) {
	ctx := ctxTimeout(t, 15*time.Minute)
	s := newStack(t, "", "", 3, 0)
	// Manual mode holds the rollout at the first reboot until approved:
	// the outage then surely falls in the middle of it.
	s.policy()["autoUpgrade"] = false
	if _, err := s.helm.Install(ctx, s.release, s.vals, testbed.InstallOptions{}); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	s.check(ctx, v1, 0)
	s.setVersion(v2)
	upgraded := make(chan error, 1)
	go func() {
		_, err := s.helm.Upgrade(ctx, s.release, s.vals, testbed.InstallOptions{Timeout: 10 * time.Minute})
		upgraded <- err
	}()
	// The rollout is under way: its pod runs and a node waits for approval.
	var rolloutPod *corev1.Pod
	// Watched on the nodes, which change last: the pod runs before them.
	err := testbed.WaitFor(ctx, testbed.NodesLW(env.Client, s.selector()), &corev1.Node{}, func(ns []*corev1.Node) (bool, error) {
		waiting := false
		for _, n := range ns {
			waiting = waiting || n.Labels[keys.UpgradeState()] == "reboot-required"
		}
		if !waiting {
			return false, nil
		}
		pods, err := env.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=rollout"})
		if err != nil {
			return false, err
		}
		for i, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				rolloutPod = &pods.Items[i]
			}
		}
		return rolloutPod != nil, nil
	})
	if err != nil {
		t.Fatalf("rollout never got under way: %v", err)
	}
	if err := env.StopComponent("kube-controller-manager"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.CoreV1().Pods(s.ns).Delete(ctx, rolloutPod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	// The outage's length is the fault injected, not a wait for anything.
	select {
	case <-time.After(60 * time.Second):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	pods, err := env.Client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=rollout"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.UID != rolloutPod.UID && p.DeletionTimestamp == nil {
			t.Errorf("rollout pod %s was created while the controller manager was down", p.Name)
		}
	}
	if err := env.StartComponent(ctx, "kube-controller-manager"); err != nil {
		t.Fatal(err)
	}
	for _, n := range s.names() {
		kubectl(ctx, t, "kubectl annotate node "+n+" npu.openfuyao.com/approve-reboot=true")
	}
	select {
	case err := <-upgraded:
		if err != nil {
			t.Fatalf("helm upgrade after the controller-manager outage: %v", err)
		}
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	s.check(ctx, v2, 1)
}
