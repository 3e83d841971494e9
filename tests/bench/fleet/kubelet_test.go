package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/tests/bench/memhost"
)

// stackPod creates a pod of the chart on node (spec.nodeName set: no
// scheduler) and makes it Running and Ready, as KWOK starts a new pod.
func stackPod(ctx context.Context, t *testing.T, ns, node, name string, driver bool, policy corev1.RestartPolicy, ip string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: policy,
			InitContainers: []corev1.Container{{Name: "wait-for-driver", Image: "hw"}, {Name: "cdi", Image: "hw"}},
			Containers:     []corev1.Container{{Name: "main", Image: "img"}}},
	}
	if driver {
		p.Labels["app"] = "npu-driver-daemonset"
		p.Annotations = map[string]string{testKeys.DriverSpecVersion(): "2"}
	}
	p, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Scheduled, which no patch of the simulator names: a status patch
	// that merges conditions by type keeps it.
	setCondition(p, corev1.PodScheduled, corev1.ConditionTrue, time.Unix(900, 0))
	kwokReady(p, time.Unix(900, 0), ip)
	if p, err = env.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return p
}

// kwokReady is what KWOK's pod-ready stage (kwok-stages.yaml) writes:
// Running and Ready, the containers started now (init containers
// completed), a pod IP; status.message is not part of it, so it is kept.
func kwokReady(p *corev1.Pod, now time.Time, ip string) {
	t := metav1.NewTime(now)
	p.Status.Phase = corev1.PodRunning
	for _, c := range []corev1.PodConditionType{corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady} {
		setCondition(p, c, corev1.ConditionTrue, now)
	}
	p.Status.ContainerStatuses, p.Status.InitContainerStatuses = nil, nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}}})
	}
	for _, c := range p.Spec.InitContainers {
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: t, FinishedAt: t}}})
	}
	p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
}

func setCondition(p *corev1.Pod, typ corev1.PodConditionType, st corev1.ConditionStatus, now time.Time) {
	c := corev1.PodCondition{Type: typ, Status: st, LastTransitionTime: metav1.NewTime(now)}
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			p.Status.Conditions[i] = c
			return
		}
	}
	p.Status.Conditions = append(p.Status.Conditions, c)
}

func condition(p *corev1.Pod, typ corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// held is the status of a pod the kubelet holds at boot: still Running,
// not Ready, its containers waiting for the first init container, which
// runs; no restart mark.
func held(p *corev1.Pod) bool {
	s := p.Status
	return s.Phase == corev1.PodRunning && s.Message == "" && condition(p, corev1.PodReady) == corev1.ConditionFalse &&
		len(s.ContainerStatuses) > 0 && s.ContainerStatuses[0].State.Waiting != nil && s.ContainerStatuses[0].State.Running == nil &&
		len(s.InitContainerStatuses) > 0 && s.InitContainerStatuses[0].State.Running != nil
}

// started is the status of a pod whose containers the kubelet started
// again at now: Running and Ready, its containers running since now with
// their restart count one up, its init containers completed, the boot's
// mark; the pod IP kept.
func started(p *corev1.Pod, mark, ip string, now time.Time) bool {
	s := p.Status
	if s.Phase != corev1.PodRunning || s.Message != mark || s.PodIP != ip || len(s.ContainerStatuses) == 0 || len(s.InitContainerStatuses) == 0 {
		return false
	}
	for _, c := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady, corev1.PodInitialized} {
		if condition(p, c) != corev1.ConditionTrue {
			return false
		}
	}
	for _, cs := range s.ContainerStatuses {
		if r := cs.State.Running; r == nil || !r.StartedAt.Time.Equal(now) || !cs.Ready || cs.RestartCount != 1 {
			return false
		}
	}
	for _, cs := range s.InitContainerStatuses {
		if cs.State.Terminated == nil || cs.State.Terminated.Reason != "Completed" {
			return false
		}
	}
	return true
}

func getPod(ctx context.Context, t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// setNodeLabel writes a label of the node on the API server and returns
// the node as written (what the simulator's informer hands its agents).
func setNodeLabel(ctx context.Context, t *testing.T, node, key, value string) *corev1.Node {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	n, err := env.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestKubeletRestartsPodsInPlaceAfterReboot(t *testing.T) {
	ctx := testCtx(t)
	ns := newNamespace(ctx, t)
	node := newNode(ctx, t, nil, nil)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	s := newSim(t, ns, clk)
	names := []string{"driver", "plugin", "exporter", "job"}
	pods := map[string]*corev1.Pod{} // as the API server last showed them
	for i, name := range names {
		policy := corev1.RestartPolicyAlways
		if name == "job" {
			policy = corev1.RestartPolicyNever
		}
		pods[name] = stackPod(ctx, t, ns, node.Name, name, name == "driver", policy, fmt.Sprintf("10.0.0.%d", i+1))
	}
	startInformers(ctx, t, s)
	for _, p := range pods {
		catchUp(ctx, t, s, p)
	}
	m := &machine{host: memhost.New(simhost.Spec{Chip: "910b", ChipCount: 8}, clk)} // booted, no driver loaded yet

	// writes counts the simulator's status writes per pod: a write that
	// changed the pod shows as a new resourceVersion on the API server.
	writes := map[string]int{}
	pass := func(wantWrite bool) time.Duration {
		t.Helper()
		after, wrote, err := s.kubelet(ctx, node, m, clk.Now())
		if err != nil || wrote != wantWrite {
			t.Fatalf("kubelet pass: wrote %v, err %v; want a write: %v", wrote, err, wantWrite)
		}
		changed := 0
		for _, name := range names {
			p := getPod(ctx, t, ns, name)
			if p.ResourceVersion != pods[name].ResourceVersion {
				writes[name]++
				changed++
			}
			pods[name] = p
			// The informer's echo of the write, before the next pass.
			catchUp(ctx, t, s, p)
		}
		if wrote != (changed > 0) {
			t.Fatalf("kubelet pass says wrote %v, but %d pods changed on the API server", wrote, changed)
		}
		return after
	}
	pass(false) // first boot: nothing to restart
	m.restart = s.podsAtBoot(node.Name, "boot-2")
	if m.restart == nil || len(m.restart.pods) != 3 {
		t.Fatalf("restarting %+v, want the driver, plugin and exporter (not the job)", m.restart)
	}

	pass(true) // hold the plugin and exporter at boot
	for _, name := range []string{"plugin", "exporter"} {
		p := pods[name]
		if writes[name] != 1 || !held(p) {
			t.Fatalf("%s: %d status writes, status after them %+v; want one write holding it", name, writes[name], p.Status)
		}
		if condition(p, corev1.PodScheduled) != corev1.ConditionTrue {
			t.Fatalf("%s: the hold dropped the PodScheduled condition (not a strategic merge patch of the status?): %+v", name, p.Status.Conditions)
		}
	}
	if writes["driver"] != 0 || writes["job"] != 0 {
		t.Fatalf("driver or job written at boot: %d, %d writes", writes["driver"], writes["job"])
	}
	pass(false) // the driver is not loaded yet

	if err := m.host.InstallDriver(ctx, "2", nil); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	pass(true) // the driver pod restarts once the load completes
	if d := pods["driver"]; writes["driver"] != 1 || !started(d, m.restart.mark(), "10.0.0.1", clk.Now()) {
		t.Fatalf("driver: %d start writes, status after them %+v", writes["driver"], d.Status)
	}
	node = setNodeLabel(ctx, t, node.Name, testKeys.DriverReady(), contract.False)
	pass(false) // driver-ready not reported
	node = setNodeLabel(ctx, t, node.Name, testKeys.DriverReady(), contract.True)
	clk.Step(time.Second)
	pass(true) // now the held pods start
	for name, ip := range map[string]string{"plugin": "10.0.0.2", "exporter": "10.0.0.3"} {
		if p := pods[name]; writes[name] != 2 || !started(p, m.restart.mark(), ip, clk.Now()) {
			t.Fatalf("%s: %d writes, status after them %+v", name, writes[name], p.Status)
		}
	}
	pass(false) // every pod Ready again: the restart is over
	if m.restart != nil || s.Stats().PodRestarts != 3 || writes["driver"] != 1 || writes["job"] != 0 {
		t.Fatalf("restart left %+v, %d restarts, %d driver writes, %d job writes", m.restart, s.Stats().PodRestarts, writes["driver"], writes["job"])
	}
}

func TestKubeletNoOpPatchIsNoWrite(t *testing.T) {
	ctx := testCtx(t)
	ns := newNamespace(ctx, t)
	node := newNode(ctx, t, nil, nil)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	s := newSim(t, ns, clk)
	plugin := stackPod(ctx, t, ns, node.Name, "plugin", false, corev1.RestartPolicyAlways, "10.0.0.1")
	startInformers(ctx, t, s)
	catchUp(ctx, t, s, plugin)
	m := &machine{host: memhost.New(simhost.Spec{Chip: "910b", ChipCount: 8}, clk)}

	// One real pass brings the pod into exactly the held state.
	m.restart = s.podsAtBoot(node.Name, "boot-2")
	if _, wrote, err := s.kubelet(ctx, node, m, clk.Now()); err != nil || !wrote {
		t.Fatalf("first hold: wrote %v, err %v; want a write", wrote, err)
	}
	heldPod := getPod(ctx, t, ns, plugin.Name)
	if heldPod.ResourceVersion == plugin.ResourceVersion || !held(heldPod) {
		t.Fatalf("first hold did not hold the pod: resourceVersion %s -> %s, status %+v", plugin.ResourceVersion, heldPod.ResourceVersion, heldPod.Status)
	}
	catchUp(ctx, t, s, heldPod)

	// Another boot within the same second: the hold says exactly what the
	// pod already says, the API server keeps the pod as it is, and no watch
	// event follows.
	m.restart = s.podsAtBoot(node.Name, "boot-3")
	if m.restart == nil {
		t.Fatal("the held pod is not restarted at the next boot")
	}
	if _, wrote, err := s.kubelet(ctx, node, m, clk.Now()); err != nil || wrote {
		t.Fatalf("a hold that changed nothing: wrote %v, err %v; want no write (nothing will bring the node back)", wrote, err)
	}
	if after := getPod(ctx, t, ns, plugin.Name); after.ResourceVersion != heldPod.ResourceVersion {
		t.Fatalf("the second hold changed the pod on the API server (resourceVersion %s -> %s): the test's premise is off", heldPod.ResourceVersion, after.ResourceVersion)
	}
	if pr := m.restart.pods[plugin.UID]; pr == nil || !pr.held {
		t.Fatal("pod not held")
	}
}

func TestRebooterDoesNotRebootWhenItsBookkeepingConflicts(t *testing.T) {
	ctx := testCtx(t)
	keys := testKeys
	stale := newNode(ctx, t, map[string]string{keys.RebootRequired(): contract.True},
		map[string]string{keys.RebootReason(): string(contract.ReasonUpgrade)})
	// The node changes on the API server after the rebooter's view of it:
	// its bookkeeping, written at that view's resourceVersion, conflicts.
	bump := `{"metadata":{"annotations":{"fleet-test/changed":"after the rebooter read the node"}}}`
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, stale.Name, types.MergePatchType, []byte(bump), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	s := newSim(t, metav1.NamespaceDefault, clk)
	m := &machine{host: memhost.New(simhost.Spec{Chip: "910b", ChipCount: 8, Driver: "1"}, clk)}
	bootID, _ := m.host.BootID()
	clk.Step(time.Hour) // past any uptime guard
	if _, wrote, err := s.rebooter(ctx, stale, m, clk.Now()); err != nil || !wrote {
		t.Fatalf("rebooter: wrote %v, err %v", wrote, err)
	}
	if m.host.RebootPending() || s.Stats().Reboots != 0 {
		t.Fatal("rebooted although the reboot bookkeeping was refused (the rollout may have withdrawn the request meanwhile)")
	}
	if s.Stats().Conflicts != 1 {
		t.Fatalf("%d conflicts counted, want 1", s.Stats().Conflicts)
	}
	getNode := func() *corev1.Node {
		t.Helper()
		n, err := env.Client.CoreV1().Nodes().Get(ctx, stale.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := getNode(); n.Annotations[keys.RebootFromBootID()] != "" {
		t.Fatalf("the bookkeeping landed on the API server from a stale node: %v", n.Annotations)
	}

	// With the node fresh from the API server the bookkeeping lands and
	// the reboot happens. The controller manager writes new nodes too
	// (taints, the TTL annotation); a conflict with one of those is
	// decided again on the newer node, as the informer would bring it.
	for attempt := 1; !m.host.RebootPending(); attempt++ {
		conflicts := s.Stats().Conflicts
		if _, wrote, err := s.rebooter(ctx, getNode(), m, clk.Now()); err != nil || !wrote {
			t.Fatalf("rebooter on the fresh node: wrote %v, err %v", wrote, err)
		}
		if !m.host.RebootPending() && (s.Stats().Conflicts == conflicts || attempt == 5) {
			t.Fatalf("no reboot once the bookkeeping can land (attempt %d, %d conflicts)", attempt, s.Stats().Conflicts)
		}
	}
	if s.Stats().Reboots != 1 {
		t.Fatalf("%d reboots counted, want 1", s.Stats().Reboots)
	}
	if n := getNode(); n.Annotations[keys.RebootFromBootID()] != bootID || n.Annotations[keys.RebootStartedReason()] != string(contract.ReasonUpgrade) {
		t.Fatalf("reboot bookkeeping on the API server: %v; want from boot ID %s, reason upgrade", n.Annotations, bootID)
	}
}

// markNotReady writes what the node lifecycle controller's MarkPodsNotReady
// does: Ready False, nothing else.
func markNotReady(ctx context.Context, t *testing.T, p *corev1.Pod, at time.Time) *corev1.Pod {
	t.Helper()
	p = p.DeepCopy()
	setCondition(p, corev1.PodReady, corev1.ConditionFalse, at)
	got, err := env.Client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// The node lifecycle controller marks the pods of a node whose heartbeats
// it missed not Ready, containers still ready; the kubelet's status sync
// writes Ready back once it runs. Pods a restart of the simulator holds
// are not touched.
func TestKubeletWritesReadyBackAfterTheNodeLifecycleController(t *testing.T) {
	ctx := testCtx(t)
	ns := newNamespace(ctx, t)
	node := newNode(ctx, t, nil, nil)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	s := newSim(t, ns, clk)
	plugin := stackPod(ctx, t, ns, node.Name, "plugin", false, corev1.RestartPolicyAlways, "10.0.0.1")
	exporter := stackPod(ctx, t, ns, node.Name, "exporter", false, corev1.RestartPolicyAlways, "10.0.0.2")
	plugin = markNotReady(ctx, t, plugin, time.Unix(950, 0))
	exporter = markNotReady(ctx, t, exporter, time.Unix(950, 0))
	startInformers(ctx, t, s)
	catchUp(ctx, t, s, plugin)
	catchUp(ctx, t, s, exporter)
	m := &machine{host: memhost.New(simhost.Spec{Chip: "910b", ChipCount: 8}, clk)}
	// The exporter is part of a restart (held by the simulator): left alone.
	m.restart = &restart{boot: "boot-2", pods: map[types.UID]*podRestart{exporter.UID: {namespace: ns, name: "exporter", held: true}}}

	if _, wrote, err := s.kubelet(ctx, node, m, clk.Now()); err != nil || !wrote {
		t.Fatalf("kubelet pass: wrote %v, err %v; want Ready written back", wrote, err)
	}
	if p := getPod(ctx, t, ns, "plugin"); condition(p, corev1.PodReady) != corev1.ConditionTrue || condition(p, corev1.PodScheduled) != corev1.ConditionTrue {
		t.Fatalf("plugin conditions %+v: want Ready again, the others kept", p.Status.Conditions)
	}
	if p := getPod(ctx, t, ns, "exporter"); p.ResourceVersion != exporter.ResourceVersion {
		t.Fatalf("the held exporter was written (resourceVersion %s → %s)", exporter.ResourceVersion, p.ResourceVersion)
	}
	if got := s.Stats().ReadyReasserts; got != 1 {
		t.Fatalf("ReadyReasserts %d, want 1", got)
	}
	catchUp(ctx, t, s, getPod(ctx, t, ns, "plugin"))
	m.restart = nil
	if _, wrote, err := s.kubelet(ctx, node, m, clk.Now()); err != nil || !wrote {
		t.Fatalf("second pass: wrote %v, err %v; want the exporter's Ready written back once no restart holds it", wrote, err)
	}
	catchUp(ctx, t, s, getPod(ctx, t, ns, "exporter"))
	if _, wrote, err := s.kubelet(ctx, node, m, clk.Now()); err != nil || wrote {
		t.Fatalf("third pass: wrote %v, err %v; want nothing left to write", wrote, err)
	}

	// A started pod the node lifecycle controller marked not Ready before
	// the simulator saw it Ready: its start is seen (the mark), so it is up
	// and gets Ready written back, and the restart does not wait for good.
	plugin = getPod(ctx, t, ns, "plugin")
	plugin.Status.Message = "containers restarted in place after boot boot-4 (simulated kubelet)"
	setCondition(plugin, corev1.PodReady, corev1.ConditionFalse, time.Unix(995, 0))
	plugin, err := env.Client.CoreV1().Pods(ns).UpdateStatus(ctx, plugin, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	catchUp(ctx, t, s, plugin)
	m.restart = &restart{boot: "boot-4", pods: map[types.UID]*podRestart{plugin.UID: {namespace: ns, name: "plugin", held: true, started: true}}}
	if _, wrote, err := s.kubelet(ctx, node, m, clk.Now()); err != nil || !wrote {
		t.Fatalf("started pod marked not Ready before it was seen: wrote %v, err %v; want Ready written back", wrote, err)
	}
	if p := getPod(ctx, t, ns, "plugin"); condition(p, corev1.PodReady) != corev1.ConditionTrue || !m.restart.pods[plugin.UID].up {
		t.Fatalf("plugin conditions %+v, up %v: want Ready again and the restart done with it", p.Status.Conditions, m.restart.pods[plugin.UID].up)
	}

	// A restarted pod already Ready again, then marked not Ready: its
	// restart waits on it no more, so the kubelet writes Ready back.
	exporter = markNotReady(ctx, t, getPod(ctx, t, ns, "exporter"), time.Unix(990, 0))
	catchUp(ctx, t, s, exporter)
	m.restart = &restart{boot: "boot-3", pods: map[types.UID]*podRestart{exporter.UID: {namespace: ns, name: "exporter", held: true, started: true, up: true}}}
	if _, wrote, err := s.kubelet(ctx, node, m, clk.Now()); err != nil || !wrote {
		t.Fatalf("restarted pod Ready again then marked not Ready: wrote %v, err %v; want Ready written back", wrote, err)
	}
	if p := getPod(ctx, t, ns, "exporter"); condition(p, corev1.PodReady) != corev1.ConditionTrue {
		t.Fatalf("exporter conditions %+v: want Ready again", p.Status.Conditions)
	}
}
