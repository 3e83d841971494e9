package reboot_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/slots"
	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/procnode"
)

var (
	env  *testbed.Env
	keys = contract.Keys{Domain: contract.DefaultDomain}
)

// fleetLabel selects one test's nodes: the chart's npuNodeSelector, so
// its DaemonSets land on no other test's nodes.
const fleetLabel = "npu-stack.test/fleet"

func TestMain(m *testing.M) { os.Exit(testbed.Main(m, &env)) }

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// fleet is one test's process nodes running the chart's rebooter.
type fleet struct {
	t     *testing.T
	ns    string
	nodes []*procnode.Node
}

// rebooterValues are chart values that run only the rebooter, reacting at
// once (no uptime guard) and without a metrics port (many rebooters share
// the loopback). edit changes them.
func rebooterValues(ns string, edit func(rebooter, recovery, upgradePolicy map[string]any)) map[string]any {
	rebooter := map[string]any{"uptimeGuardMinutes": 0, "metricsPort": 0, "slots": 1, "slotTTLSeconds": 3600}
	recovery := map[string]any{"autoRecover": false, "maxWedgedNodes": "100%"}
	upgrade := map[string]any{"autoUpgrade": false}
	if edit != nil {
		edit(rebooter, recovery, upgrade)
	}
	return map[string]any{
		"namespace":       ns,
		"npuNodeSelector": map[string]any{fleetLabel: ns},
		"driver":          map[string]any{"enabled": false, "upgradePolicy": upgrade},
		"devicePlugin":    map[string]any{"enabled": false},
		"exporter":        map[string]any{"enabled": false},
		"cdi":             map[string]any{"enabled": false},
		"hooks":           map[string]any{"resume": map[string]any{"enabled": false}},
		"rebooter":        rebooter,
		"recoveryPolicy":  recovery,
	}
}

// newFleet starts n process nodes in a namespace of their own and installs
// the chart on them with rebooterValues changed by edit.
func newFleet(t *testing.T, n int, edit func(rebooter, recovery, upgradePolicy map[string]any)) *fleet {
	return startFleet(t, n, edit, nil, nil)
}

// newFleetThen is newFleet with a step between starting the nodes and
// installing the chart.
func newFleetThen(t *testing.T, n int, edit func(rebooter, recovery, upgradePolicy map[string]any), beforeInstall func(*fleet)) *fleet {
	return startFleet(t, n, edit, nil, beforeInstall)
}

// newFleetWith is newFleet with a last edit of the whole chart values.
func newFleetWith(t *testing.T, n int, edit func(rebooter, recovery, upgradePolicy map[string]any), values func(map[string]any)) *fleet {
	return startFleet(t, n, edit, values, nil)
}

func startFleet(t *testing.T, n int, edit func(rebooter, recovery, upgradePolicy map[string]any), values func(map[string]any), beforeInstall func(*fleet)) *fleet {
	t.Helper()
	ctx := ctxTimeout(t, 3*time.Minute)
	base := strings.ToLower(strings.TrimPrefix(t.Name(), "Test"))
	if len(base) > 24 {
		base = base[:24]
	}
	nsObj, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rb-" + base + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	ns := nsObj.Name
	nodes, err := env.AddProcessNodes(ctx, n, testbed.NodeSpec{Prefix: "rb-" + base, Labels: map[string]string{fleetLabel: ns}, Driver: "25.3.0"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, ns: ns, nodes: nodes}
	if beforeInstall != nil {
		beforeInstall(f)
	}
	vals := rebooterValues(ns, edit)
	if values != nil {
		values(vals)
	}
	if _, err := env.Helm(ns).Install(ctx, ns, vals, testbed.InstallOptions{DisableHooks: true}); err != nil {
		t.Fatal(err)
	}
	running := 0
	err = testbed.WaitFor(ctx, testbed.PodsLW(env.Client, ns, "app.kubernetes.io/component=rebooter"), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		running = 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == n, nil
	})
	if err != nil {
		t.Fatalf("rebooters did not start (%d of %d running): %v", running, n, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, node := range f.nodes {
				t.Logf("rebooter log of %s:\n%s", node.Name(), f.logs(node))
			}
		}
	})
	return f
}

// logs is what the rebooter pod(s) on node printed, across restarts.
func (f *fleet) logs(node *procnode.Node) string {
	pods, err := env.Client.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=rebooter", FieldSelector: "spec.nodeName=" + node.Name()})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		b.WriteString(node.Logs(f.ns, p.Name, "rebooter"))
	}
	return b.String()
}

func patch(t *testing.T, node string, change kube.NodeChange) {
	t.Helper()
	if _, err := kube.PatchNode(context.Background(), env.Client, node, change); err != nil {
		t.Fatal(err)
	}
}

// requestReboot sets what the requester (rollout or health-watch) sets.
func requestReboot(t *testing.T, node string, reason contract.RebootReason) {
	t.Helper()
	change := kube.NodeChange{
		Labels:      map[string]*string{keys.RebootRequired(): kube.Set(contract.True)},
		Annotations: map[string]*string{keys.RebootReason(): kube.Set(string(reason))},
	}
	if reason == contract.ReasonRecovery {
		change.Labels[keys.DriverReady()] = kube.Set(contract.False)
	}
	patch(t, node, change)
}

// wedge is what the health-watch does on a wedged chip, until it runs in
// these tests itself.
func wedge(t *testing.T, node *procnode.Node) {
	t.Helper()
	if err := node.Host().Wedge(0); err != nil {
		t.Fatal(err)
	}
	requestReboot(t, node.Name(), contract.ReasonRecovery)
}

func approve(t *testing.T, node string) {
	t.Helper()
	patch(t, node, kube.NodeChange{Annotations: map[string]*string{keys.ApproveReboot(): kube.Set(contract.True)}})
}

func waitNode(ctx context.Context, t *testing.T, name, what string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	return testbed.WaitNode(ctx, t, env.Client, name, what, cond)
}

// rebooted: the boot ID moved on from before and the marker is cleared.
func rebooted(before string) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool {
		_, marked := n.Labels[keys.RebootRequired()]
		_, reason := n.Annotations[keys.RebootReason()]
		_, from := n.Annotations[keys.RebootFromBootID()]
		return n.Status.NodeInfo.BootID != before && !marked && !reason && !from
	}
}

func bootID(t *testing.T, name string) string {
	t.Helper()
	n, err := env.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Status.NodeInfo.BootID
}

func hostState(t *testing.T, node *procnode.Node) simhost.State {
	t.Helper()
	st, err := node.Host().State()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitEvent waits for an event on node with reason whose message contains
// substr, and returns it.
func waitEvent(ctx context.Context, t *testing.T, node string, reason contract.EventReason, substr string) *corev1.Event {
	t.Helper()
	return testbed.WaitNodeEvent(ctx, t, env.Client, node, string(reason), substr)
}

func eventsLW(node string, reason contract.EventReason) cache.ListerWatcher {
	return testbed.NodeEventsLW(env.Client, node, string(reason))
}

func leasesLW(ns string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(env.Client.CoordinationV1().RESTClient(), "leases", ns, fields.Everything())
}

// events lists the events of node with reason.
func events(t *testing.T, node string, reason contract.EventReason) []corev1.Event {
	t.Helper()
	list, err := env.Client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.name": node, "reason": string(reason)}.String()})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// invariant watches a fleet's nodes and slot Leases for the whole test
// and records the most nodes ever rebooting at once (reboot recorded and
// not completed) and the most live slot holders.
type invariant struct {
	mu          sync.Mutex
	maxInFlight int
	maxHolders  int
	seen        map[string]map[string]string // node -> rebooter annotations ever seen
}

func watchInvariant(t *testing.T, f *fleet) *invariant {
	inv := &invariant{seen: map[string]map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	nodeLW := cache.NewFilteredListWatchFromClient(env.Client.CoreV1().RESTClient(), "nodes", "", func(o *metav1.ListOptions) {
		o.LabelSelector = labels.Set{fleetLabel: f.ns}.String()
	})
	var nodeStore, leaseStore cache.Store
	check := func() {
		inv.mu.Lock()
		defer inv.mu.Unlock()
		inFlight := 0
		for _, o := range nodeStore.List() {
			n := o.(*corev1.Node)
			if n.Annotations[keys.RebootFromBootID()] != "" {
				inFlight++
			}
			for _, k := range []string{keys.RebootFromBootID(), keys.RebootStartedAt()} {
				if v, ok := n.Annotations[k]; ok {
					if inv.seen[n.Name] == nil {
						inv.seen[n.Name] = map[string]string{}
					}
					inv.seen[n.Name][k] = v
				}
			}
		}
		inv.maxInFlight = max(inv.maxInFlight, inFlight)
		if leaseStore == nil {
			return
		}
		holders := 0
		for _, o := range leaseStore.List() {
			if l := o.(*coordinationv1.Lease); ptr.Deref(l.Spec.HolderIdentity, "") != "" && !slots.Free(l, time.Now()) {
				holders++
			}
		}
		inv.maxHolders = max(inv.maxHolders, holders)
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { check() }, UpdateFunc: func(any, any) { check() }, DeleteFunc: func(any) { check() }}
	var nodeCtl, leaseCtl cache.Controller
	nodeStore, nodeCtl = cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: nodeLW, ObjectType: &corev1.Node{}, Handler: h})
	leaseLW := cache.NewFilteredListWatchFromClient(env.Client.CoordinationV1().RESTClient(), "leases", f.ns, func(o *metav1.ListOptions) {
		o.LabelSelector = slots.Selector().String()
	})
	ls, leaseCtl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: leaseLW, ObjectType: &coordinationv1.Lease{}, Handler: h})
	inv.mu.Lock()
	leaseStore = ls
	inv.mu.Unlock()
	go nodeCtl.RunWithContext(ctx)
	go leaseCtl.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), nodeCtl.HasSynced, leaseCtl.HasSynced) {
		t.Fatal("invariant watch did not sync")
	}
	return inv
}

func (inv *invariant) max() (inFlight, holders int) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.maxInFlight, inv.maxHolders
}

func (inv *invariant) annotation(node, key string) string {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.seen[node][key]
}
