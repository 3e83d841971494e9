package rollout_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// chaosSeed is fixed so a failure replays; NPU_STACK_CHAOS_SEED picks
// another.
const chaosSeed = 20261124

// TestRolloutUnderChaos: a 20-node rollout while the rollout process is
// SIGKILLed 3 times, a rebooter is SIGKILLed during its node's reboot,
// the API server is down for 15 s, an admin cordons and uncordons nodes
// and edits unrelated labels, and a chip wedges. A watcher checks the
// whole time that no more than maxUnavailable nodes are down for the
// rollout's sake; at the end every node is done, each rebooted exactly
// once (the wedged one once more, for its recovery), the pre-cordoned
// node still cordoned.
func TestRolloutUnderChaos(t *testing.T) {
	seed := uint64(chaosSeed)
	if s := os.Getenv("NPU_STACK_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("NPU_STACK_CHAOS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("chaos seed %d (replay with NPU_STACK_CHAOS_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	ctx := ctxTimeout(t, 20*time.Minute)
	const n, maxUnavailable = 20, 4
	f := newFleetWith(t, n, func(p, _ map[string]any) {
		p["maxParallelUpgrades"] = maxUnavailable
		p["maxUnavailable"] = maxUnavailable
		p["rebootTimeoutSeconds"] = 300
	}, map[string]any{"recoveryPolicy": map[string]any{"autoRecover": true, "maxWedgedNodes": "50%"}})
	order := rng.Perm(n)
	pre := f.nodes[order[0]].Name()
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, pre, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	w := watchChaos(t, f)

	// Faults fire at points of progress drawn from the seed, so one seed
	// replays the same story whatever the machine's speed.
	kills := []int{1 + rng.IntN(5), 6 + rng.IntN(5), 11 + rng.IntN(5)}
	outageAt := 3 + rng.IntN(12)
	adminAt := 2 + rng.IntN(14)
	wedgeAt := 4 + rng.IntN(12)
	t.Logf("plan: rollout SIGKILLed once %v nodes are done, API server down 15 s after %d, admin cordon/uncordon after %d, a chip wedge after %d; a rebooter SIGKILLed in the first reboot seen", kills, outageAt, adminAt, wedgeAt)

	args := f.upgrade(ctx, newVersion)
	r := f.startRollout(args)
	var rebooterKilled, outageDone, adminDone bool
	killed := 0
	for progress := 0; progress < n-1; {
		var err error
		progress, err = w.waitProgress(ctx, progress+1, func(inReboot string) {
			if rebooterKilled || inReboot == "" {
				return
			}
			rebooterKilled = true
			killRebooter(ctx, t, f, inReboot)
		})
		if err != nil {
			t.Fatalf("rollout stalled at %d/%d nodes done: %v\n%s", progress, n, err, tail(r.output(), 30))
		}
		for killed < len(kills) && progress >= kills[killed] {
			_ = r.cmd.Process.Signal(syscall.SIGKILL)
			<-r.done
			killed++
			t.Logf("%d done: rollout SIGKILLed (%d of %d); restarted as the Job would", progress, killed, len(kills))
			r = f.startRollout(args)
		}
		if !outageDone && progress >= outageAt {
			outageDone = true
			t.Logf("%d done: API server down for 15 s", progress)
			if err := env.StopComponent("kube-apiserver"); err != nil {
				t.Fatal(err)
			}
			select { // the outage's length is the fault, not a wait for anything
			case <-time.After(15 * time.Second):
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
			if err := env.StartComponent(ctx, "kube-apiserver"); err != nil {
				t.Fatal(err)
			}
		}
		if node := ""; !adminDone && progress >= adminAt {
			if node = w.doneNode(rng, pre); node == "" {
				continue // none idle yet: at the next progress
			}
			adminDone = true
			t.Logf("%d done: admin cordons %s, relabels a node, uncordons %s", progress, node, node)
			w.excuse(node)
			patchNode(ctx, t, node, `{"spec":{"unschedulable":true},"metadata":{"labels":{"team":"ml-platform"}}}`)
			patchNode(ctx, t, f.nodes[rng.IntN(n)].Name(), `{"metadata":{"labels":{"rack":"r`+strconv.Itoa(rng.IntN(9))+`"}}}`)
			w.unexcuseAt(node, patchNode(ctx, t, node, `{"spec":{"unschedulable":false}}`))
		}
		if node := ""; w.wedgedNode() == "" && progress >= wedgeAt {
			if node = w.doneNode(rng, pre); node == "" {
				continue
			}
			w.wedge(node)
			t.Logf("%d done: chip 2 of %s wedges", progress, node)
			pn, _ := env.ProcessNode(node)
			if err := pn.Host().Wedge(2); err != nil {
				t.Fatal(err)
			}
		}
	}
	if killed < len(kills) || !outageDone || !adminDone {
		t.Errorf("faults not all injected: %d rollout kills, outage %v, admin %v", killed, outageDone, adminDone)
	}
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d:\n%s", code, tail(r.output(), 40))
	}
	// The recovery of the wedged node may still be under way.
	f.waitNodes(ctx, "every node schedulable again (but the pre-cordoned one), driver ready", func(nd *corev1.Node) bool {
		return nd.Labels[keys.DriverReady()] == "true" && nd.Labels[keys.RebootRequired()] == "" && nd.Spec.Unschedulable == (nd.Name == pre)
	})
	for _, pn := range f.nodes {
		st, err := pn.Host().State()
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		if pn.Name() == w.wedgedNode() {
			want = 2
		}
		if st.Reboots != want || st.LoadedDriver != newVersion {
			t.Errorf("%s: %d reboots with driver %q, want %d and %s", pn.Name(), st.Reboots, st.LoadedDriver, want, newVersion)
		}
	}
	if !rebooterKilled {
		t.Error("no rebooter was killed during a reboot: the fault was never injected")
	}
	if w.wedgedNode() == "" {
		t.Error("no chip wedged: the fault was never injected")
	}
	if max, worst := w.max(); max > maxUnavailable {
		t.Errorf("up to %d nodes unavailable for the rollout at once (%v); maxUnavailable is %d", max, worst, maxUnavailable)
	} else {
		t.Logf("at most %d nodes unavailable at once (%v)", max, worst)
	}
}

// patchNode returns the resource version the patch wrote.
func patchNode(ctx context.Context, t *testing.T, node, patch string) string {
	t.Helper()
	nd, err := env.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("admin patch %s: %v", node, err)
	}
	return nd.ResourceVersion
}

// killRebooter SIGKILLs the rebooter of node, whose reboot is under way.
func killRebooter(ctx context.Context, t *testing.T, f *fleet, node string) {
	t.Helper()
	pods, err := env.Client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=rebooter", FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("rebooter pod of %s: %v (%d)", node, err, len(pods.Items))
	}
	pn, _ := env.ProcessNode(node)
	if err := pn.KillContainer(f.ns, pods.Items[0].Name, "rebooter"); err != nil {
		t.Fatal(err)
	}
	t.Logf("rebooter of %s SIGKILLed during its reboot", node)
}

// chaosWatch follows the fleet's nodes: progress (nodes on the new
// driver), the first node seen in reboot-required, and the most nodes
// unavailable at once except those the admin or a chip fault took down.
type chaosWatch struct {
	f     *fleet
	mu    sync.Mutex
	nodes map[string]*corev1.Node
	// excused maps a node the admin took down to the resource version
	// of the admin's uncordon ("" while it is not written yet): the
	// watch may deliver the cordon after the uncordon's reply, so the
	// excuse ends when the watch reaches that version, not at the reply.
	excused map[string]string
	worst   []string
	changed chan struct{}
	wedged  string
}

func watchChaos(t *testing.T, f *fleet) *chaosWatch {
	w := &chaosWatch{f: f, nodes: map[string]*corev1.Node{}, excused: map[string]string{}, changed: make(chan struct{}, 1)}
	stop := make(chan struct{})
	reflectNodes(t, f.selector(), stop, w.see)
	t.Cleanup(func() { close(stop) })
	return w
}

// see judges one state of the fleet.
func (w *chaosWatch) see(nodes []*corev1.Node) {
	w.mu.Lock()
	w.nodes = make(map[string]*corev1.Node, len(nodes))
	for _, n := range nodes {
		w.nodes[n.Name] = n
		if until, ok := w.excused[n.Name]; ok && until != "" && rvAtLeast(n.ResourceVersion, until) {
			delete(w.excused, n.Name)
		}
	}
	var down []string
	for name, n := range w.nodes {
		if _, excused := w.excused[name]; (n.Spec.Unschedulable || !nodeReady(n)) && !excused && name != w.wedged {
			down = append(down, downReason(n))
		}
	}
	if len(down) > len(w.worst) {
		sort.Strings(down)
		w.worst = down
	}
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// downReason names a node and why it counts as unavailable, so a
// broken budget says which write or status made it so.
func downReason(n *corev1.Node) string {
	var why []string
	if n.Spec.Unschedulable {
		why = append(why, "cordoned")
	}
	if !nodeReady(n) {
		why = append(why, "NotReady")
	}
	why = append(why, "state="+n.Labels[keys.UpgradeState()], "rv="+n.ResourceVersion)
	return n.Name + "(" + strings.Join(why, " ") + ")"
}

func (w *chaosWatch) wedge(node string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wedged = node
}

func (w *chaosWatch) wedgedNode() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wedged
}

func (w *chaosWatch) excuse(node string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.excused[node] = ""
}

// unexcuseAt ends node's excuse once the watch has seen version rv.
func (w *chaosWatch) unexcuseAt(node, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if seen := w.nodes[node]; seen != nil && rvAtLeast(seen.ResourceVersion, rv) {
		delete(w.excused, node)
		return
	}
	w.excused[node] = rv
}

// rvAtLeast compares resource versions as the test bed's etcd writes
// them (increasing integers); clients must not, tests of one API
// server may.
func rvAtLeast(rv, want string) bool {
	a, errA := strconv.ParseUint(rv, 10, 64)
	b, errB := strconv.ParseUint(want, 10, 64)
	return errA == nil && errB == nil && a >= b
}

func (w *chaosWatch) max() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.worst), w.worst
}

// waitProgress waits until at least want nodes run the new driver and
// returns how many do; inReboot is told of a node in reboot-required.
func (w *chaosWatch) waitProgress(ctx context.Context, want int, inReboot func(string)) (int, error) {
	for {
		w.mu.Lock()
		done, rebooting := 0, ""
		for _, n := range w.nodes {
			if n.Labels[keys.DriverVersion()] == newVersion {
				done++
			}
			if n.Labels[keys.UpgradeState()] == "reboot-required" && n.Labels[keys.RebootRequired()] == "true" {
				rebooting = n.Name
			}
		}
		w.mu.Unlock()
		inReboot(rebooting)
		if done >= want {
			return done, nil
		}
		select {
		case <-w.changed:
		case <-ctx.Done():
			return done, fmt.Errorf("waiting for %d nodes done: %w", want, ctx.Err())
		}
	}
}

// doneNode picks a node already on the new driver, not in flight.
func (w *chaosWatch) doneNode(rng *rand.Rand, except string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var done []string
	for name, n := range w.nodes {
		if n.Labels[keys.DriverVersion()] == newVersion && n.Labels[keys.UpgradeState()] == "" && name != except && name != w.wedged && !n.Spec.Unschedulable {
			done = append(done, name)
		}
	}
	sort.Strings(done)
	if len(done) == 0 {
		return ""
	}
	return done[rng.IntN(len(done))]
}
