package e2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestInstallUpgradeRollbackWithTheSeedCommands is the user's day 2 in the
// chart's default namespace and release name, driven as docs/driver-upgrade.md says:
// helm install, helm upgrade --set driver.version (manual mode, approved
// with the documented kubectl commands), helm rollback; the contract's
// kubectl commands run verbatim.
func TestInstallUpgradeRollbackWithTheSeedCommands(t *testing.T) {
	ctx := ctxTimeout(t, 15*time.Minute)
	const ns, rel = "npu-operator", "npu-stack"
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Run after the uninstall below (cleanups run last first): the Flux
	// story, which runs after this one, must find no npu-operator, since
	// it tests install.createNamespace.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := env.DeleteNamespace(ctx, ns); err != nil {
			t.Errorf("%v: TestDefaultNamespaceStories/Flux will fail on it", err)
		}
	})
	s := newStack(t, ns, rel, 2, 2)
	s.policy()["autoUpgrade"] = false // the chart's default: manual
	t.Cleanup(func() { _ = s.helm.Uninstall(rel) })

	if _, err := s.helm.Install(ctx, rel, s.vals, testbed.InstallOptions{Timeout: 5 * time.Minute}); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	s.check(ctx, v1, 0) // fresh machines: installed on first boot, no reboot

	// Approve every node up front, one by one (allowed before the need).
	for _, n := range s.names() {
		kubectl(ctx, t, "kubectl annotate node "+n+" npu.openfuyao.com/approve-reboot=true")
	}
	s.setVersion(v2)
	up, err := s.helm.Upgrade(ctx, rel, s.vals, testbed.InstallOptions{Timeout: 8 * time.Minute})
	if err != nil {
		t.Fatalf("helm upgrade --set driver.version=%s: %v", v2, err)
	}
	if up.Info.Status != release.StatusDeployed {
		t.Fatalf("release status %s after upgrade", up.Info.Status)
	}
	s.check(ctx, v2, 1)

	out := kubectl(ctx, t, "kubectl get nodes -L npu.openfuyao.com/driver-upgrade-state -l "+s.selector())
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		if f := strings.Fields(line); len(f) != 5 {
			t.Errorf("after the rollout the state column must be empty on every node: %q", line)
		}
	}
	events := kubectl(ctx, t, "kubectl get events -A --field-selector reason=RebootRequired")
	for _, n := range s.names() {
		if !strings.Contains(events, n) {
			t.Errorf("no RebootRequired event for %s:\n%s", n, events)
		}
	}
	if !strings.Contains(events, "reason=upgrade") {
		t.Errorf("RebootRequired events must say reason=upgrade:\n%s", events)
	}
	ds := kubectl(ctx, t, "kubectl get ds -n npu-operator -l app=npu-driver-daemonset -o name")
	if !strings.Contains(ds, "npu-stack-driver-910b") || !strings.Contains(ds, "npu-stack-driver-310p") {
		t.Errorf("driver DaemonSets per profile:\n%s", ds)
	}

	// helm rollback npu-stack 1, approved with the documented bulk command.
	kubectl(ctx, t, "kubectl get nodes -l openfuyao.com/npu.present -o name | xargs -I{} kubectl annotate {} npu.openfuyao.com/approve-reboot=true --overwrite")
	// The seed's selector must not reach the CPU node that runs the hooks.
	others, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "!openfuyao.com/npu.present"})
	if err != nil || len(others.Items) == 0 {
		t.Fatalf("the CPU node must carry no openfuyao.com/npu.present label: %v (%d nodes without it)", err, len(others.Items))
	}
	for _, n := range others.Items {
		if _, ok := n.Annotations[keys.ApproveReboot()]; ok {
			t.Errorf("the approve-all command annotated the CPU node %s", n.Name)
		}
	}
	if err := s.helm.Rollback(rel, 1, testbed.InstallOptions{Timeout: 8 * time.Minute}); err != nil {
		t.Fatalf("helm rollback %s 1: %v", rel, err)
	}
	st, err := s.helm.Status(rel)
	if err != nil {
		t.Fatal(err)
	}
	if st.Info.Status != release.StatusDeployed || st.Version != 3 {
		t.Fatalf("after rollback: revision %d %s, want 3 deployed", st.Version, st.Info.Status)
	}
	s.check(ctx, v1, 2)
}

// TestHookFailureIsLoudAndRerunContinues: a rollout that cannot finish in
// its deadline fails its Job at once, and the Helm upgrade fails with the
// hook's log naming the stuck nodes and the fix; approving and rerunning
// helm upgrade continues from the nodes' state.
func TestHookFailureIsLoudAndRerunContinues(t *testing.T) {
	t.Parallel() // its own namespace, release and nodes: see main_test.go
	ctx := ctxTimeout(t, 12*time.Minute)
	s := newStack(t, "", "", 2, 0)
	s.policy()["autoUpgrade"] = false
	s.policy()["maxParallelUpgrades"] = 0
	s.policy()["maxUnavailable"] = "100%"
	s.vals["hooks"].(map[string]any)["activeDeadlineSeconds"] = 60
	if _, err := s.helm.Install(ctx, s.release, s.vals, testbed.InstallOptions{}); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	s.check(ctx, v1, 0)
	s.setVersion(v2)
	var hookLog strings.Builder
	_, err := s.helm.Upgrade(ctx, s.release, s.vals, testbed.InstallOptions{HookOutput: &hookLog})
	if err == nil {
		t.Fatal("an upgrade whose rollout cannot finish must fail")
	}
	log := hookLog.String()
	for _, want := range append(s.names(), "approve-reboot=true", "deadline") {
		if !strings.Contains(err.Error()+log, want) {
			t.Errorf("the failed upgrade must tell %q; error: %v\nhook log:\n%s", want, err, tail(log, 8))
		}
	}
	for _, n := range s.names() {
		node, err := env.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Labels[keys.UpgradeState()] != string(contract.StateRebootRequired) {
			t.Fatalf("%s: state %q, want it kept at reboot-required for the next run", n, node.Labels[keys.UpgradeState()])
		}
	}
	// The admin approves and reruns the same upgrade: it continues.
	kubectl(ctx, t, "kubectl get nodes -l "+s.selector()+" -o name | xargs -I{} kubectl annotate {} npu.openfuyao.com/approve-reboot=true --overwrite")
	if _, err := s.helm.Upgrade(ctx, s.release, s.vals, testbed.InstallOptions{}); err != nil {
		t.Fatalf("rerun of helm upgrade: %v", err)
	}
	s.check(ctx, v2, 1)
}

var _ = context.Background
