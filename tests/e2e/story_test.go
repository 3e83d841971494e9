package e2e_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// deployer is a real deployment engine (a helm CLI, helmfile, Flux's
// helm-controller, Argo CD) driving the chart.
type deployer interface {
	// deploy makes the engine apply vals — an install the first time,
	// then an upgrade — and returns a wait for the engine to report them
	// deployed; the caller approves reboots meanwhile.
	deploy(ctx context.Context, t *testing.T, vals map[string]any) (wait func())
	// rollback makes the engine return to the first deployed values, the
	// engine's own way.
	rollback(ctx context.Context, t *testing.T) (wait func())
	// deployAux deploys another chart as its own release or Application:
	// the stand-in DRA kubelet plugin the rollout re-rolls.
	deployAux(ctx context.Context, t *testing.T, c *auxChart, vals map[string]any)
	// verify asserts from the engine's own status objects that step (1
	// install, 2 upgrade, 3 rollback) is what it deployed, and that the
	// engine sees no drift in what it owns.
	verify(ctx context.Context, t *testing.T, step int)
}

// storyNodes: two 910B nodes and a 310P node; maxUnavailable 2 counts the
// pre-cordoned node, so one node at a time is taken down.
const storyMaxUnavailable = 2

// runStory is a deployer's day 2 in the chart's default manual mode:
// install, a driver.version bump approved with the seed's approve-all
// command, every node on the new version, a rollback approved node by
// node with the seed's per-node command. Invariants hold throughout:
// each node rebooted exactly once per version change, never more than
// maxUnavailable nodes unavailable, the pre-cordoned node stays cordoned,
// the device plugin, the exporter and the other release's DRA plugin on
// each node started after that node's driver became ready.
func runStory(t *testing.T, s *stack, d deployer) {
	ctx := ctxTimeout(t, 25*time.Minute)
	s.policy()["autoUpgrade"] = false // the chart's default: manual
	s.policy()["maxParallelUpgrades"] = 2
	s.policy()["maxUnavailable"] = storyMaxUnavailable
	s.policy()["rebootTimeoutSeconds"] = 300
	s.auxNS = s.ns
	if a, ok := d.(interface{ auxNamespace() string }); ok {
		s.auxNS = a.auxNamespace()
	}
	s.policy()["rerollTargets"] = []any{map[string]any{"namespace": s.auxNS, "name": draName}}
	s.vals["hooks"].(map[string]any)["activeDeadlineSeconds"] = 900

	aux := publishDRAChart(ctx, t)
	d.deployAux(ctx, t, aux, map[string]any{"image": env.Product.PauseImage, "nodeSelector": map[string]any{fleetLabel: s.fleet}})
	s.mirror(ctx, v1, v2)

	d.deploy(ctx, t, s.vals)()
	s.check(ctx, v1, 0) // fresh machines: installed on first boot, no reboot
	d.verify(ctx, t, 1)
	var drift *driftWatch
	if w, ok := d.(driftWatching); ok {
		drift = w.watchDrift(ctx, t)
	}

	s.preCordoned = s.nodes[0].Name()
	kubectl(ctx, t, "kubectl cordon "+s.preCordoned)
	inv := watchInvariants(t, s)

	s.setVersion(v2)
	done := d.deploy(ctx, t, s.vals)
	s.waitRebootAsked(ctx)
	kubectl(ctx, t, s.approveAll())
	done()
	s.check(ctx, v2, 1)
	s.checkRerolled(ctx)
	s.checkSeedVerification(ctx, v2)
	d.verify(ctx, t, 2)

	stop := s.approveEach(ctx)
	d.rollback(ctx, t)()
	stop()
	s.setVersion(v1)
	s.check(ctx, v1, 2)
	s.checkRerolled(ctx)
	s.checkSeedVerification(ctx, v1)
	d.verify(ctx, t, 3)
	inv.assert(t)
	if drift != nil {
		drift.assertNone(t, "the engine's drift view during the story")
		d.(driftWatching).plantDrift(ctx, t, drift)
	}
}

// mirror pushes stand-ins of the driver images versions render to, as
// seed Step 1.1 has the admin copy them before the bump.
func (s *stack) mirror(ctx context.Context, versions ...string) {
	s.t.Helper()
	prev := s.vals["driver"].(map[string]any)["version"]
	defer func() { s.vals["driver"].(map[string]any)["version"] = prev }()
	for _, v := range versions {
		s.setVersion(v)
		if err := s.helm.MirrorDriverImages(ctx, s.vals); err != nil {
			s.t.Fatal(err)
		}
	}
}

// waitRebootAsked returns once a node of the stack waits for its reboot:
// the moment an admin following the seed approves.
func (s *stack) waitRebootAsked(ctx context.Context) {
	s.t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range s.listNodes(ctx) {
			if n.Labels[keys.UpgradeState()] == string(contract.StateRebootRequired) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		s.t.Fatalf("no node of %s reached %s: %v", s.selector(), contract.StateRebootRequired, err)
	}
}

// listNodes lists the stack's nodes; nil on an API error, which the
// polling callers take as "not yet".
func (s *stack) listNodes(ctx context.Context) []corev1.Node {
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: s.selector()})
	if err != nil {
		s.t.Logf("list nodes %s: %v", s.selector(), err)
		return nil
	}
	return nodes.Items
}

// approveEach approves, with the seed's per-node command, each node of
// the stack that waits for a reboot without an approval, until stopped;
// stop reports (in the test's goroutine) any approval that failed.
// approveAll is the seed's approve-all command narrowed to this stack's
// nodes: stories run in parallel (main_test.go), and an approval of
// another story's node would authorise a reboot that story waits to see
// refused. TestInstallUpgradeRollbackWithTheSeedCommands, which runs
// alone, runs the seed's command verbatim.
func (s *stack) approveAll() string {
	return "kubectl get nodes -l openfuyao.com/npu.present," + s.selector() + " -o name | xargs -I{} kubectl annotate {} npu.openfuyao.com/approve-reboot=true --overwrite"
}

func (s *stack) approveEach(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var failed []error
	wg.Go(func() {
		approved := map[string]bool{}
		_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			for _, n := range s.listNodes(ctx) {
				_, asked := n.Annotations[keys.ApproveReboot()]
				if n.Labels[keys.UpgradeState()] != string(contract.StateRebootRequired) || asked || approved[n.Name] {
					continue
				}
				approved[n.Name] = true
				if _, err := shell(ctx, "nodeName="+n.Name+"; kubectl annotate node ${nodeName} npu.openfuyao.com/approve-reboot=true"); err != nil {
					failed = append(failed, err)
				}
			}
			return false, nil
		})
	})
	return func() {
		s.t.Helper()
		cancel()
		wg.Wait()
		for _, err := range failed {
			s.t.Error(err)
		}
	}
}

// checkSeedVerification runs seed Step 4's node listing verbatim: every
// node of the stack listed with an empty DRIVER-UPGRADE-STATE; and its
// driver-pod listing (in the stack's namespace): each image on version.
func (s *stack) checkSeedVerification(ctx context.Context, version string) {
	s.t.Helper()
	out := kubectl(ctx, s.t, `kubectl get nodes -l openfuyao.com/npu.present \
  -o custom-columns=NAME:.metadata.name,DRIVER-UPGRADE-STATE:.metadata.labels.npu\.openfuyao\.com/driver-upgrade-state`)
	for _, n := range s.names() {
		found := false
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == n {
				found = true
				if len(f) != 2 || f[1] != "<none>" {
					s.t.Errorf("seed Step 4: %s still has a state: %q", n, line)
				}
			}
		}
		if !found {
			s.t.Errorf("seed Step 4 does not list %s:\n%s", n, out)
		}
	}
	pods := kubectl(ctx, s.t, `kubectl get pod -n `+s.ns+` -l app=npu-driver-daemonset \
  -o jsonpath='{range .items[*]}{.spec.nodeName}{"\t"}{.spec.containers[0].image}{"\n"}{end}'`)
	lines := strings.Split(strings.TrimSpace(pods), "\n")
	if len(lines) < len(s.nodes) {
		s.t.Errorf("seed Step 4 lists %d driver pods, want %d:\n%s", len(lines), len(s.nodes), pods)
	}
	for _, l := range lines {
		if !strings.Contains(l, version) {
			s.t.Errorf("seed Step 4: driver pod not on %s: %q", version, l)
		}
	}
}

// invariants watches the stack's nodes for the whole rollout.
type invariants struct {
	s        *stack
	mu       sync.Mutex
	nodes    map[string]*corev1.Node
	worst    []string
	uncordon []string // events where the pre-cordoned node was schedulable
}

func watchInvariants(t *testing.T, s *stack) *invariants {
	inv := &invariants{s: s, nodes: map[string]*corev1.Node{}}
	lw := testbed.NodesLW(env.Client, s.selector())
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: &corev1.Node{}, Handler: cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { inv.see(o.(*corev1.Node)) },
		UpdateFunc: func(_, o any) { inv.see(o.(*corev1.Node)) },
	}})
	stop := make(chan struct{})
	go ctrl.Run(stop)
	t.Cleanup(func() { close(stop) })
	if !cache.WaitForCacheSync(stop, ctrl.HasSynced) {
		t.Fatal("node watch never synced")
	}
	return inv
}

func (inv *invariants) see(n *corev1.Node) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.nodes[n.Name] = n
	if n.Name == inv.s.preCordoned && !n.Spec.Unschedulable {
		inv.uncordon = append(inv.uncordon, "resourceVersion "+n.ResourceVersion)
	}
	var down []string
	for name, n := range inv.nodes {
		if n.Spec.Unschedulable || !nodeReady(n) {
			down = append(down, name)
		}
	}
	if len(down) > len(inv.worst) {
		sort.Strings(down)
		inv.worst = down
	}
}

func (inv *invariants) assert(t *testing.T) {
	t.Helper()
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if len(inv.worst) > storyMaxUnavailable {
		t.Errorf("%d nodes unavailable at once (%v), maxUnavailable is %d", len(inv.worst), inv.worst, storyMaxUnavailable)
	}
	if len(inv.uncordon) > 0 {
		t.Errorf("the pre-cordoned node %s was uncordoned: %v", inv.s.preCordoned, inv.uncordon)
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkRerolled: after a driver change, the exporter and the other
// release's DRA plugin on every node started after that node's driver
// pod became Ready (the device plugin is checked by check).
func (s *stack) checkRerolled(ctx context.Context) {
	s.t.Helper()
	s.checkStartedAfterDriver(ctx, s.ns, "app.kubernetes.io/component="+contract.ComponentExporter, "exporter")
	s.checkStartedAfterDriver(ctx, s.auxNS, "app="+draName, "DRA plugin")
}

func (s *stack) String() string { return fmt.Sprintf("stack %s/%s", s.ns, s.release) }
