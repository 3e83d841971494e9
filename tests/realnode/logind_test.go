package realnode_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/realnode"
)

// TestRealNodeRebootThroughLogind runs the chart's rebooter on a real
// node whose bus has a stand-in logind and whose kubelet has graceful
// node shutdown on (shutdownGracePeriod), and has it reboot the node. The
// rebooter asks logind (Reboot(false), as root); logind announces the
// shutdown (PrepareForShutdown(true)) and waits for the kubelet's delay
// inhibitor; the kubelet has the node's pods, the rebooter's among them,
// terminate within their grace periods and lets go; only then does logind ask systemd for reboot.target,
// and the node reboots once. The stand-in logind refuses a caller that
// is not root as logind does on a node without polkit.
func TestRealNodeRebootThroughLogind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	ns, node := rebootBed(ctx, t, "logind", testbed.RealNodeOptions{})
	first := node.BootIDs()[0]
	kubeletLock := waitInhibitor(ctx, t, node, "kubelet")
	checkLogindRefusals(ctx, t, node)

	rebooterPod := installRebooter(ctx, t, ns, node)
	askReboot(ctx, t, node, first)
	if ids := node.BootIDs(); len(ids) != 2 || node.RebootJobs() != 1 {
		t.Fatalf("node %s: boot IDs %v after %d reboot.target jobs; want 2 boot IDs after 1 job", node.Name(), ids, node.RebootJobs())
	}
	if err := node.RebootErr(); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	rec, _ := node.Logind(0)
	t.Logf("logind of the first boot: %+v", rec)
	// The first call is checkLogindRefusals' as nobody.
	if len(rec.Reboots) != 2 || rec.Reboots[1] != (realnode.LogindReboot{UID: 0, Interactive: false}) {
		t.Fatalf("logind got Reboot calls %+v; want the refused one of nobody, then the rebooter's Reboot(false) from uid 0, accepted: the rebooter must ask logind, not systemd", rec.Reboots)
	}
	if len(rec.PrepareForShutdown) != 1 || !rec.PrepareForShutdown[0] {
		t.Errorf("logind sent PrepareForShutdown %v; want [true]", rec.PrepareForShutdown)
	}
	lock := rec.Inhibitors[kubeletLock]
	switch {
	case rec.DelayTimedOut:
		t.Errorf("logind rebooted when InhibitDelayMaxSec passed with the kubelet's lock %+v still held; want the kubelet to let go once its pods stopped", lock)
	case lock.Released.IsZero() || lock.Released.Before(rec.PreparedAt) || rec.RebootTargetAt.Before(lock.Released):
		t.Errorf("shutdown announced %s, kubelet's lock released %s, reboot.target asked %s; want announce, release, reboot.target in that order",
			rec.PreparedAt.Format(time.StampMilli), lock.Released.Format(time.StampMilli), rec.RebootTargetAt.Format(time.StampMilli))
	default:
		t.Logf("kubelet let go %s after PrepareForShutdown; reboot.target %s after that",
			lock.Released.Sub(rec.PreparedAt).Round(time.Millisecond), rec.RebootTargetAt.Sub(lock.Released).Round(time.Millisecond))
	}
	// The kubelet's log of the first boot (the node's /var/log is on its
	// disk): it saw the shutdown and asked the rebooter's pod, the node's
	// one pod, to terminate within its group's grace period (the
	// rebooter is system-node-critical: shutdownGracePeriodCriticalPods)
	// before it let go.
	checkKubeletLog(t, node, `"Shutdown manager detected new shutdown event"`,
		`"Shutdown manager killing pod with gracePeriod" pod="`+ns+"/"+rebooterPod+`"`,
		`"Shutdown manager completed processing shutdown event, node will shutdown shortly"`)
	stopClean(t, node)
	t.Logf("test wall time %s", time.Since(start).Round(time.Second))
}

// TestRealNodeRebootWithoutLogind: on a node whose machine has no logind
// (nothing owns org.freedesktop.login1, nothing would start it) the
// rebooter asks systemd's StartUnit(reboot.target) and the node reboots
// once; the kubelet could not start its graceful node shutdown.
func TestRealNodeRebootWithoutLogind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	ns, node := rebootBed(ctx, t, "nologind", testbed.RealNodeOptions{NoLogind: true})
	first := node.BootIDs()[0]
	installRebooter(ctx, t, ns, node)
	askReboot(ctx, t, node, first)
	if ids := node.BootIDs(); len(ids) != 2 || node.RebootJobs() != 1 {
		t.Fatalf("node %s: boot IDs %v after %d reboot.target jobs; want 2 boot IDs after 1 job", node.Name(), ids, node.RebootJobs())
	}
	if _, ok := node.Logind(0); ok {
		t.Fatal("a node without logind has a logind record")
	}
	checkKubeletLog(t, node, `"Failed to start node shutdown manager"`)
	stopClean(t, node)
	t.Logf("test wall time %s", time.Since(start).Round(time.Second))
}

// rebootBed is a namespace and a Ready 910B real node selected by it.
func rebootBed(ctx context.Context, t *testing.T, prefix string, opts testbed.RealNodeOptions) (string, *realnode.Node) {
	t.Helper()
	nsObj, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	node, err := env.AddRealNode(ctx, testbed.NodeSpec{Prefix: prefix, Chip: "910b", ChipCount: 2, Labels: map[string]string{fleetLabel: ns}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logRebooter(t, ns)
			dumpLogs(t, node, "kubelet", "dbus")
		}
		_ = node.Stop()
	})
	testbed.WaitNode(ctx, t, env.Client, node.Name(), "Ready", func(n *corev1.Node) bool {
		return nodeReady(n) && n.Status.NodeInfo.BootID == node.BootIDs()[0]
	})
	return ns, node
}

// installRebooter installs the chart with only the rebooter and returns
// the name of its pod on node, once it runs.
func installRebooter(ctx context.Context, t *testing.T, ns string, node *realnode.Node) string {
	t.Helper()
	vals := map[string]any{
		"namespace":       ns,
		"npuNodeSelector": map[string]any{fleetLabel: ns},
		"driver":          map[string]any{"enabled": false, "upgradePolicy": map[string]any{"autoUpgrade": false}},
		"devicePlugin":    map[string]any{"enabled": false},
		"exporter":        map[string]any{"enabled": false},
		"cdi":             map[string]any{"enabled": false},
		"hooks":           map[string]any{"resume": map[string]any{"enabled": false}},
		"rebooter":        map[string]any{"uptimeGuardMinutes": 0, "metricsPort": 0},
	}
	if _, err := env.Helm(ns).Install(ctx, ns, vals, testbed.InstallOptions{DisableHooks: true}); err != nil {
		t.Fatal(err)
	}
	waitRebooterRunning(ctx, t, ns, node.Name())
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=rebooter", FieldSelector: "spec.nodeName=" + node.Name()})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("rebooter pod on %s: %v, %v", node.Name(), pods, err)
	}
	return pods.Items[0].Name
}

// askReboot approves an upgrade reboot of node and waits until the
// rebooter has rebooted it and cleared its marker.
func askReboot(ctx context.Context, t *testing.T, node *realnode.Node, first string) {
	t.Helper()
	change := kube.NodeChange{
		Labels:      map[string]*string{keys.RebootRequired(): kube.Set(contract.True)},
		Annotations: map[string]*string{keys.RebootReason(): kube.Set(string(contract.ReasonUpgrade)), keys.ApproveReboot(): kube.Set(contract.True)},
	}
	if _, err := kube.PatchNode(ctx, env.Client, node.Name(), change); err != nil {
		t.Fatal(err)
	}
	testbed.WaitNode(ctx, t, env.Client, node.Name(), "rebooted, marker cleared by the rebooter", func(n *corev1.Node) bool {
		_, marked := n.Labels[keys.RebootRequired()]
		return !marked && n.Annotations[keys.RebootedFromBootID()] == first && n.Status.NodeInfo.BootID != first
	})
}

// waitInhibitor waits until who holds a delay inhibitor of shutdown on
// the node's logind (the kubelet takes it once it has started) and
// returns its index in the record. The record has nothing to watch: it is
// polled.
func waitInhibitor(ctx context.Context, t *testing.T, node *realnode.Node, who string) int {
	t.Helper()
	idx := -1
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		rec, _ := node.Logind(0)
		for i, in := range rec.Inhibitors {
			if in.Who == who && in.What == "shutdown" && in.Mode == "delay" && in.UID == 0 && in.Released.IsZero() {
				idx = i
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		rec, _ := node.Logind(0)
		t.Fatalf("node %s: no delay inhibitor of shutdown held by %s: %v (inhibitors %+v; kubelet config shutdownGracePeriod, log %s)", node.Name(), who, err, rec.Inhibitors, node.LogPath("kubelet"))
	}
	return idx
}

// checkLogindRefusals asks the node's logind what it refuses as logind
// does: a Reboot by a caller that is not root (dbus-send in the node as
// nobody; the node has no polkit), which reboots nothing, and reads the
// InhibitDelayMaxUSec the kubelet read.
func checkLogindRefusals(ctx context.Context, t *testing.T, node *realnode.Node) {
	t.Helper()
	out, err := node.Command(ctx, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"dbus-send", "--system", "--print-reply", "--dest=org.freedesktop.login1", "/org/freedesktop/login1",
		"org.freedesktop.login1.Manager.Reboot", "boolean:false").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "org.freedesktop.DBus.Error.AccessDenied") {
		t.Errorf("Reboot(false) as nobody: %v, %s; want AccessDenied", err, out)
	}
	conn, err := dbus.Dial("unix:path=" + node.Path("/run/dbus/system_bus_socket"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.Auth(nil); err != nil {
		t.Fatal(err)
	}
	if err := conn.Hello(); err != nil {
		t.Fatal(err)
	}
	v, err := conn.Object("org.freedesktop.login1", "/org/freedesktop/login1").GetProperty("org.freedesktop.login1.Manager.InhibitDelayMaxUSec")
	if err != nil || v.Value() != uint64(5_000_000) {
		t.Errorf("InhibitDelayMaxUSec = %v, %v; want logind's default 5000000 (5 s)", v, err)
	}
	rec, _ := node.Logind(0)
	if len(rec.Reboots) != 1 || rec.Reboots[0].Err != "org.freedesktop.DBus.Error.AccessDenied" || rec.Reboots[0].UID != 65534 || len(rec.PrepareForShutdown) != 0 || node.RebootJobs() != 0 {
		t.Errorf("after a refused Reboot: logind record %+v, %d reboot jobs; want one refusal of uid 65534, no shutdown announced, no job", rec, node.RebootJobs())
	}
}

// checkKubeletLog finds every line fragment in the kubelet's log, each on
// a line of its own.
func checkKubeletLog(t *testing.T, node *realnode.Node, fragments ...string) {
	t.Helper()
	f, err := os.Open(node.LogPath("kubelet"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	found := map[string]bool{}
	var shutdown []string // the shutdown manager's lines, to show on failure
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "hutdown") {
			shutdown = append(shutdown, sc.Text())
		}
		for _, frag := range fragments {
			if strings.Contains(sc.Text(), frag) {
				found[frag] = true
			}
		}
	}
	for _, frag := range fragments {
		if !found[frag] {
			t.Errorf("kubelet log %s has no line with %s; its shutdown lines:\n%s", node.LogPath("kubelet"), frag, strings.Join(shutdown, "\n"))
		}
	}
}
