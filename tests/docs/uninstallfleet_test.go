package docs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/procnode"
)

// uninstallFleetLabel selects one uninstall test's nodes. They carry no
// openfuyao.com/npu.present, so the README tour's release (npuNodeSelector
// openfuyao.com/npu.present=true), installed in the same cluster when the
// whole package runs, leaves them alone.
const uninstallFleetLabel = "npu-stack.test/uninstall"

const (
	uninstallOld = "1.0.0"
	uninstallNew = "2.0.0"
)

// hostFiles are npu-stack's files on a node (chart defaults), which the
// docs say the driver pods remove with uninstall.cleanup and which stay
// without it.
var hostFiles = []string{"/var/run/cdi/huawei-com-npu.yaml", "/run/npu-stack", "/var/lib/npu-stack"}

// uninstallFleet is a release "npu-stack" (fullnameOverride: its
// namespace, so its cluster-wide objects do not meet the tour's release
// of the same name) on three process NPU nodes caught mid-upgrade, plus a
// CPU node for the hook pods (the NPU nodes are all cordoned by then).
type uninstallFleet struct {
	ns string
	// keys are under a labelDomain of this release's own, so neither the
	// uninstall nor the tour's release of the same package (default
	// domain, its agents still running) touches the other's keys.
	keys contract.Keys
	// rollout: cordoned by the rollout (reboot-required, waiting for its
	// approval); admin: cordoned by the admin before the upgrade, in
	// reboot-required too; recovery: cordoned by a recovery reboot (a chip
	// that stays wedged), skipped by the rollout.
	rollout, admin, recovery *procnode.Node
	cpu                      *procnode.Node
}

func (f *uninstallFleet) npu() []*procnode.Node {
	return []*procnode.Node{f.rollout, f.admin, f.recovery}
}

func (f *uninstallFleet) names() []string {
	var out []string
	for _, n := range append(f.npu(), f.cpu) {
		out = append(out, n.Name())
	}
	return out
}

// midUpgrade installs the release (hook mode: its post-install rollout
// Job completes and, a hook, stays after helm uninstall), then upgrades
// the driver in manual mode with the rollout in mode ("hook": a
// post-upgrade hook Job, which helm uninstall leaves running without its
// RBAC, the upgrade waiting for it in the background; "job": a regular
// Job, which helm uninstall deletes), and returns once every node is
// where the test wants it.
func midUpgrade(ctx context.Context, t *testing.T, cleanup bool, mode string) *uninstallFleet {
	t.Helper()
	ns, err := env.NewNamespace(ctx, "uninstall")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := env.DeleteNamespace(cctx, ns); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	labels := map[string]string{uninstallFleetLabel: ns, contract.LabelChip: "910b", contract.LabelKernel: "5.15.0-105-generic", contract.LabelOS: "ubuntu22.04"}
	npu, err := env.AddProcessNodes(ctx, 3, testbed.NodeSpec{Prefix: "unin", CPU: true, Labels: labels, Driver: uninstallOld})
	if err != nil {
		t.Fatal(err)
	}
	cpu, err := env.AddProcessNodes(ctx, 1, testbed.NodeSpec{Prefix: "unin-cpu", CPU: true})
	if err != nil {
		t.Fatal(err)
	}
	f := &uninstallFleet{ns: ns, keys: contract.Keys{Domain: ns + ".npu.example.com"}, rollout: npu[0], admin: npu[1], recovery: npu[2], cpu: cpu[0]}
	patchNode(ctx, t, f.admin.Name(), `{"spec":{"unschedulable":true}}`)
	patchNode(ctx, t, f.recovery.Name(), fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, f.keys.UpgradeSkip()))

	vals := map[string]any{
		"namespace": ns, "fullnameOverride": ns, "labelDomain": f.keys.Domain,
		// null drops the chart's default openfuyao.com/npu.present=true.
		"npuNodeSelector": map[string]any{uninstallFleetLabel: ns, contract.LabelNPUPresent: nil},
		"driver": map[string]any{"version": uninstallOld, "upgradePolicy": map[string]any{
			"autoUpgrade": false, "maxParallelUpgrades": 0, "maxUnavailable": "100%"}},
		"rebooter":    map[string]any{"uptimeGuardMinutes": 0, "metricsPort": 0},
		"healthWatch": map[string]any{"probeIntervalSeconds": 5, "probeTimeoutSeconds": 2},
		"uninstall":   map[string]any{"cleanup": cleanup},
		// As a default install has it (the test bed turns it off), on a
		// port no other process of this machine holds: every process
		// node's pods share one address.
		"fleetExporter": map[string]any{"enabled": true, "port": testbed.FreePort(t)},
	}
	h := env.Helm(ns)
	if _, err := h.Install(ctx, "npu-stack", vals, testbed.InstallOptions{Timeout: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitFleet(ctx, t, f, "driver "+uninstallOld+" loaded and ready", func(n *corev1.Node) string {
		if n.Labels[f.keys.DriverVersion()] != uninstallOld || n.Labels[f.keys.DriverReady()] != contract.True {
			return "driver not ready"
		}
		return ""
	})

	// A chip fault no reboot fixes: the recovery reboot, once approved,
	// cordons the node, and after the boot it stays cordoned (its
	// driver never gets ready) with a new recovery request.
	if err := f.recovery.Host().Update(func(st *simhost.State) error { st.StickyWedge = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := f.recovery.Host().Wedge(0); err != nil {
		t.Fatal(err)
	}
	vals["driver"].(map[string]any)["version"] = uninstallNew
	vals["hooks"] = map[string]any{"mode": mode}
	upgrade(ctx, t, h, vals, mode)
	waitFleet(ctx, t, f, "the recovery asked for", func(n *corev1.Node) string {
		if n.Name == f.recovery.Name() && n.Annotations[f.keys.RebootReason()] != string(contract.ReasonRecovery) {
			return "no recovery request yet"
		}
		return ""
	})
	patchNode(ctx, t, f.recovery.Name(), fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, f.keys.ApproveReboot()))
	waitFleet(ctx, t, f, "mid-upgrade", func(n *corev1.Node) string {
		switch n.Name {
		case f.rollout.Name(), f.admin.Name():
			// Drained, the new driver installed over the loaded one,
			// waiting for the approval of its reboot.
			if st := n.Labels[f.keys.UpgradeState()]; st != string(contract.StateRebootRequired) || n.Annotations[f.keys.InstalledDriver()] != uninstallNew {
				return fmt.Sprintf("state %q installed %q", st, n.Annotations[f.keys.InstalledDriver()])
			}
		case f.recovery.Name():
			st, err := f.recovery.Host().State()
			if err != nil || st.Reboots == 0 || n.Annotations[f.keys.RecoveryCordoned()] != contract.True || n.Annotations[f.keys.RebootFromBootID()] != "" {
				return fmt.Sprintf("reboots %d recovery-cordoned %q (%v)", st.Reboots, n.Annotations[f.keys.RecoveryCordoned()], err)
			}
		}
		if !n.Spec.Unschedulable {
			return "not cordoned"
		}
		return ""
	})
	if w := getNodeDoc(ctx, t, f.admin.Name()).Annotations[f.keys.UpgradeWasCordoned()]; w != contract.True {
		t.Fatalf("the rollout recorded %s=%q on %s, which the admin cordoned before the upgrade", f.keys.UpgradeWasCordoned(), w, f.admin.Name())
	}
	return f
}

// upgrade runs the helm upgrade; in hook mode in the background, since
// it waits for its post-upgrade rollout, which waits for approvals: it
// ends once the uninstall has deleted that hook Job (or at the test's
// end), failing, with no release left to record it in.
func upgrade(ctx context.Context, t *testing.T, h *testbed.Helm, vals map[string]any, mode string) {
	t.Helper()
	opts := testbed.InstallOptions{Timeout: 5 * time.Minute}
	if mode != "hook" {
		if _, err := h.Upgrade(ctx, "npu-stack", vals, opts); err != nil {
			t.Fatal(err)
		}
		return
	}
	bg, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := h.Upgrade(bg, "npu-stack", vals, opts)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			t.Logf("the background helm upgrade ended: %v", err)
		case <-time.After(opts.Timeout):
			t.Errorf("the background helm upgrade did not end within its timeout %s", opts.Timeout)
		}
	})
}

// waitFleet waits until why is "" for every NPU node of f.
func waitFleet(ctx context.Context, t *testing.T, f *uninstallFleet, what string, why func(*corev1.Node) string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	not := map[string]string{}
	err := testbed.WaitFor(wctx, cache.NewFilteredListWatchFromClient(env.Client.CoreV1().RESTClient(), "nodes", "", func(o *metav1.ListOptions) {
		o.LabelSelector = uninstallFleetLabel + "=" + f.ns
	}), &corev1.Node{}, func(nodes []*corev1.Node) (bool, error) {
		clear(not)
		for _, n := range nodes {
			if w := why(n); w != "" {
				not[n.Name] = w
			}
		}
		return len(nodes) == 3 && len(not) == 0, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (not yet: %v)\n%s", what, err, not, env.PodLogs(ctx, f.ns, 30))
	}
}

func patchNode(ctx context.Context, t *testing.T, name, patch string) {
	t.Helper()
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func getNodeDoc(ctx context.Context, t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// cordoned are the names among names whose Node is unschedulable.
func cordoned(ctx context.Context, t *testing.T, names []string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		if getNodeDoc(ctx, t, n).Spec.Unschedulable {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// npuStackKeys are the keys under domain on node name.
func npuStackKeys(ctx context.Context, t *testing.T, domain, name string) []string {
	t.Helper()
	n := getNodeDoc(ctx, t, name)
	var out []string
	for what, m := range map[string]map[string]string{"label": n.Labels, "annotation": n.Annotations} {
		for k := range m {
			if strings.HasPrefix(k, domain+"/") {
				out = append(out, what+" "+k)
			}
		}
	}
	slices.Sort(out)
	return out
}

// presentHostFiles are the hostFiles on p's simulated host.
func presentHostFiles(p *procnode.Node) []string {
	var out []string
	for _, f := range hostFiles {
		if _, err := os.Lstat(p.Host().Path(filepath.Clean(f))); err == nil {
			out = append(out, f)
		}
	}
	return out
}
