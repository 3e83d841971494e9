package rollout_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// The rebooter, the health-watch and the rollout share each node's
// reboot request, approval and cordon; these tests make their writes meet
// in the orders a real fleet produces.

// A kubelet slow to report the new boot ID after the upgrade's reboot:
// the rebooter has cleared the reboot request when the rollout still sees
// the old boot ID. The rollout must wait for the kubelet, not ask for a
// second reboot.
func TestKubeletLagGetsExactlyOneReboot(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	ctx := ctxTimeout(t, 6*time.Minute)
	node := f.nodes[0]
	name := node.Name()
	// Longer than the rebooter needs for a second reboot (its wait for
	// the RebootRequired event included), so that a second request would
	// be carried out before the kubelet reports.
	node.DelayBootIDReport(25 * time.Second)
	// The lag starts once the rebooter has recorded the reboot and
	// cleared the request, so a loaded machine, on which the rebooter
	// takes longer than the delay, still shows the window.
	node.HoldBootIDReportUntil(func(n *corev1.Node) bool {
		return n.Annotations[keys.RebootedFromBootID()] != "" && n.Labels[keys.RebootRequired()] == ""
	})
	args := f.upgrade(ctx, newVersion)
	r := f.startRollout(args)
	var lagged *corev1.Node
	waitNode(ctx, t, name, "the rebooter completed the reboot while the kubelet still reports the old boot ID", func(n *corev1.Node) bool {
		from := n.Annotations[keys.RebootedFromBootID()]
		if from != "" && from == n.Status.NodeInfo.BootID && n.Labels[keys.RebootRequired()] == "" {
			lagged = n
			return true
		}
		return false
	})
	if got := lagged.Labels[keys.UpgradeState()]; got != string(contract.StateRebootRequired) {
		t.Fatalf("state %q during the lag, want reboot-required", got)
	}
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d:\n%s", code, tail(r.output(), 30))
	}
	f.checkDone(ctx) // exactly one reboot
}

// kubectlSh runs a shell command line with the test bed's kubectl first
// on PATH, as an admin would type it.
func kubectlSh(ctx context.Context, t *testing.T, line string) {
	t.Helper()
	kubectl := filepath.Join(env.BinDir, "kubectl")
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig, "PATH="+filepath.Dir(kubectl)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
}

// The documented bulk approval also hits a node that needs no upgrade
// reboot (here a skipped one). Its approval must not outlive the upgrade:
// a later wedge under recoveryPolicy.autoRecover=false waits for an
// approval of its own.
func TestBulkApprovalDoesNotAuthoriseALaterRecovery(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 2, func(p, _ map[string]any) {
		p["autoUpgrade"] = false
		p["maxUnavailable"] = "100%"
	})
	ctx := ctxTimeout(t, 8*time.Minute)
	up, skipped := f.nodes[0], f.nodes[1]
	if _, err := kube.PatchNode(ctx, env.Client, skipped.Name(), kube.NodeChange{Labels: map[string]*string{keys.UpgradeSkip(): kube.Set(contract.True)}}); err != nil {
		t.Fatal(err)
	}
	args := f.upgrade(ctx, newVersion)
	r := f.startRollout(args)
	waitNode(ctx, t, up.Name(), "waiting for approval in reboot-required", func(n *corev1.Node) bool {
		return n.Labels[keys.UpgradeState()] == string(contract.StateRebootRequired)
	})
	kubectlSh(ctx, t, "kubectl annotate nodes -l "+f.selector()+" "+keys.ApproveReboot()+"=true --overwrite")
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d:\n%s", code, tail(r.output(), 30))
	}
	for _, pn := range f.nodes {
		if v, ok := getNode(t, pn.Name()).Annotations[keys.ApproveReboot()]; ok {
			t.Fatalf("%s: approval %q left after the rollout", pn.Name(), v)
		}
	}
	ev := events(ctx, t, skipped.Name(), contract.EventApprovalRemoved, 1)
	if !strings.Contains(ev[0].Message, "skipped") {
		t.Errorf("ApprovalRemoved must say why: %s", ev[0].Message)
	}

	// The chip wedges after the upgrade; recovery is manual (the default).
	if err := skipped.Host().Wedge(0); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, skipped.Name(), "recovery requested by the health-watch", func(n *corev1.Node) bool {
		return n.Labels[keys.RebootRequired()] == contract.True && n.Annotations[keys.RebootReason()] == string(contract.ReasonRecovery)
	})
	pending := events(ctx, t, skipped.Name(), contract.EventRebootPending, 1)
	if !strings.Contains(pending[0].Message, "waits for approval") {
		t.Fatalf("RebootPending: %s; want a wait for approval", pending[0].Message)
	}
	if st, err := skipped.Host().State(); err != nil || st.Reboots != 0 {
		t.Fatalf("recovery reboot without an approval: %+v %v", st, err)
	}
}

// craft puts a node into an upgrade state by hand, cordoned by the
// rollout (not by an admin), as a rollout that stopped there leaves it.
func craft(ctx context.Context, t *testing.T, node string, state contract.UpgradeState) {
	t.Helper()
	if _, err := kube.PatchNode(ctx, env.Client, node, kube.NodeChange{
		Labels: map[string]*string{keys.UpgradeState(): kube.Set(string(state))},
		Annotations: map[string]*string{keys.UpgradeWasCordoned(): kube.Set(contract.False), keys.UpgradeTarget(): kube.Set(newVersion),
			keys.UpgradeSince(): kube.Set(time.Now().UTC().Format(time.RFC3339))},
		Unschedulable: ptrTo(true),
	}); err != nil {
		t.Fatal(err)
	}
}

func ptrTo[T any](v T) *T { return &v }

func wedgeAndWait(ctx context.Context, t *testing.T, f *fleet) {
	t.Helper()
	node := f.nodes[0]
	if err := node.Host().Wedge(0); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, node.Name(), "recovery requested by the health-watch", func(n *corev1.Node) bool {
		return n.Labels[keys.RebootRequired()] == contract.True && n.Annotations[keys.RebootReason()] == string(contract.ReasonRecovery)
	})
}

// A recovery that starts after validation, before the uncordon: the node
// stays cordoned, handed over to the recovery, until the recovery ends.
func TestRecoveryAtUncordonKeepsTheNodeCordoned(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	ctx := ctxTimeout(t, 6*time.Minute)
	name := f.nodes[0].Name()
	args := f.upgrade(ctx, oldVersion) // the chart's rollout arguments; nothing to upgrade
	craft(ctx, t, name, contract.StateUncordonRequired)
	wedgeAndWait(ctx, t, f)
	before := getNode(t, name).Status.NodeInfo.BootID
	f.startRollout(args)
	var uncordoned bool
	waitNode(ctx, t, name, "upgrade done, cordon handed over to the recovery", func(n *corev1.Node) bool {
		if n.Labels[keys.UpgradeState()] != "" {
			return false
		}
		uncordoned = !n.Spec.Unschedulable
		return uncordoned || n.Annotations[keys.RecoveryCordoned()] == contract.True
	})
	if uncordoned {
		t.Fatal("the rollout uncordoned a node whose recovery reboot is pending")
	}
	if got := getNode(t, name).Annotations[keys.RebootReason()]; got != string(contract.ReasonRecovery) {
		t.Fatalf("reboot-reason %q, want recovery", got)
	}
	approve(t, name)
	waitNode(ctx, t, name, "recovered and uncordoned by the rebooter", func(n *corev1.Node) bool {
		_, held := n.Annotations[keys.RecoveryCordoned()]
		return n.Status.NodeInfo.BootID != before && n.Labels[keys.DriverReady()] == contract.True && !n.Spec.Unschedulable && !held &&
			n.Labels[keys.RebootRequired()] == ""
	})
	if st, err := f.nodes[0].Host().State(); err != nil || st.Reboots != 1 {
		t.Fatalf("want one recovery reboot: %+v %v", st, err)
	}
}

// A recovery pending when the upgrade reaches its reboot: the rollout
// keeps reason=recovery (so autoUpgrade does not authorise it under
// autoRecover=false), and the one recovery reboot also loads the new
// driver.
func TestRecoveryAtRebootKeepsItsReasonAndServesTheUpgrade(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil) // autoUpgrade: true, recoveryPolicy.autoRecover: false
	ctx := ctxTimeout(t, 7*time.Minute)
	name := f.nodes[0].Name()
	args := f.upgrade(ctx, newVersion)
	craft(ctx, t, name, contract.StateDrainRequired)
	wedgeAndWait(ctx, t, f)
	r := f.startRollout(args)
	waitNode(ctx, t, name, "in reboot-required", func(n *corev1.Node) bool {
		return n.Labels[keys.UpgradeState()] == string(contract.StateRebootRequired)
	})
	pending := events(ctx, t, name, contract.EventRebootPending, 1)
	if !strings.Contains(pending[0].Message, "reason=recovery") || !strings.Contains(pending[0].Message, "waits for approval") {
		t.Fatalf("RebootPending: %s; want the recovery waiting for approval", pending[0].Message)
	}
	n := getNode(t, name)
	if got := n.Annotations[keys.RebootReason()]; got != string(contract.ReasonRecovery) {
		t.Fatalf("reboot-reason %q, want recovery", got)
	}
	if st, err := f.nodes[0].Host().State(); err != nil || st.Reboots != 0 {
		t.Fatalf("rebooted without the recovery's approval: %+v %v", st, err)
	}
	approve(t, name)
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d:\n%s", code, tail(r.output(), 30))
	}
	f.checkDone(ctx) // one reboot, new driver, uncordoned
	if ev := events(ctx, t, name, contract.EventRebootCompleted, 1); !strings.Contains(ev[0].Message, "reason=recovery") {
		t.Errorf("RebootCompleted: %s; want reason=recovery", ev[0].Message)
	}
}

// A recovery that starts during validation: the recovery takes the
// cordon the rollout holds, and neither owner uncordons while the other
// still holds the node; the last one to let go does.
func TestRecoveryDuringValidationKeepsTheNodeCordoned(t *testing.T) {
	t.Parallel()
	f := newFleet(t, 1, nil)
	ctx := ctxTimeout(t, 6*time.Minute)
	name := f.nodes[0].Name()
	args := f.upgrade(ctx, oldVersion) // the chart's rollout arguments; nothing to upgrade
	craft(ctx, t, name, contract.StateValidationRequired)
	wedgeAndWait(ctx, t, f)
	before := getNode(t, name).Status.NodeInfo.BootID
	var (
		mu    sync.Mutex
		early []string
	)
	watchNodeChanges(t, name, func(n *corev1.Node) {
		mu.Lock()
		defer mu.Unlock()
		_, held := n.Annotations[keys.RecoveryCordoned()]
		recovering := held || (n.Labels[keys.RebootRequired()] == contract.True && n.Annotations[keys.RebootReason()] == string(contract.ReasonRecovery))
		if !n.Spec.Unschedulable && (recovering || n.Labels[keys.UpgradeState()] != "") {
			early = append(early, "rv "+n.ResourceVersion+": uncordoned with state "+n.Labels[keys.UpgradeState()]+", recovery-cordoned "+n.Annotations[keys.RecoveryCordoned()])
		}
	})
	r := f.startRollout(args)
	approve(t, name)
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d:\n%s", code, tail(r.output(), 30))
	}
	waitNode(ctx, t, name, "recovered, upgrade done, uncordoned", func(n *corev1.Node) bool {
		_, held := n.Annotations[keys.RecoveryCordoned()]
		return n.Status.NodeInfo.BootID != before && n.Labels[keys.UpgradeState()] == "" && !held && !n.Spec.Unschedulable
	})
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Fatalf("uncordoned while an owner still held the node: %v", early)
	}
	if st, err := f.nodes[0].Host().State(); err != nil || st.Reboots != 1 {
		t.Fatalf("want one recovery reboot: %+v %v", st, err)
	}
}

// watchNodeChanges calls see with every version of node the API server
// sends until the test ends, from the version current now on.
func watchNodeChanges(t *testing.T, name string, see func(*corev1.Node)) {
	t.Helper()
	lw := cache.NewFilteredListWatchFromClient(env.Client.CoreV1().RESTClient(), "nodes", "", func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + name
	})
	record := func(o any) {
		if n, ok := o.(*corev1.Node); ok {
			see(n)
		}
	}
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: &corev1.Node{}, Handler: cache.ResourceEventHandlerFuncs{
		AddFunc: record, UpdateFunc: func(_, o any) { record(o) },
	}})
	stop := make(chan struct{})
	go ctrl.Run(stop)
	t.Cleanup(func() { close(stop) })
	if !cache.WaitForCacheSync(t.Context().Done(), ctrl.HasSynced) {
		t.Fatal("node watch did not sync")
	}
}
