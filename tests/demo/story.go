package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// Story runs the four stories of `make demo` on env and fleet, writing a
// readable progress view to out.
type Story struct {
	Env   *testbed.Env
	Fleet *Fleet
	Out   io.Writer
	// Release and Namespace of the chart (the chart's defaults).
	Release, Namespace string
	// OutDir receives the timeline picture of each rollout story
	// (timeline-<story>.svg); "" writes none.
	OutDir string

	keys  contract.Keys
	start time.Time
	stats map[string]*nodeStats
	// reboots are the reboots each real node has had to have so far.
	reboots map[string]int
	// workloadImage is an image real nodes run (the stand-in device
	// plugin's); workloads the UID of the workload's pod last seen, by
	// real node.
	workloadImage string
	workloads     map[string]types.UID
}

type nodeStats struct {
	profile string
	reboots int
	busy    time.Duration // time spent in upgrade states
	since   time.Time
}

const (
	v1 = "25.3.0"
	v2 = "25.5.0"
)

// Run tells the stories in order and returns the first failure.
func (s *Story) Run(ctx context.Context) error {
	s.keys = contract.Keys{Domain: contract.DefaultDomain}
	s.start = time.Now()
	s.stats = map[string]*nodeStats{}
	for _, n := range s.Fleet.NPU {
		st, err := n.Host().State()
		if err != nil {
			return err
		}
		s.stats[n.Name()] = &nodeStats{profile: st.Chip}
	}
	s.reboots = map[string]int{}
	for _, n := range s.Fleet.Real {
		s.stats[n.Name()] = &nodeStats{profile: n.Chip}
	}
	if len(s.Fleet.Real) > 0 {
		s.title("stand-in Ascend driver %s and %s, device plugin and exporter images for the real nodes", v1, v2)
		if err := s.pushStandins(ctx, v1, v2); err != nil { // built by AddFleet
			return err
		}
	}
	stop := s.watchNodes(ctx)
	defer stop()
	h := s.Env.Helm(s.Namespace)

	chart := "charts/npu-stack"
	if p := s.Env.Product; p != nil {
		chart = p.ChartRef() + " --version " + p.ChartVersion + " --set imageRegistry=" + p.Registry
	}
	s.title("1/4 install: helm install %s %s --set driver.version=%s", s.Release, chart, v1)
	if _, err := h.Install(ctx, s.Release, s.values(v1), testbed.InstallOptions{Timeout: 10 * time.Minute}); err != nil {
		return err
	}
	if err := s.expect(ctx, v1); err != nil {
		return err
	}
	if err := s.realServing(ctx, true); err != nil {
		return err
	}
	if err := s.checkReal(v1); err != nil {
		return err
	}
	if len(s.Fleet.Real) > 0 {
		if err := s.startWorkloads(ctx, s.workloadImage, v1); err != nil {
			return err
		}
	}

	s.title("2/4 upgrade in manual mode: helm upgrade %s %s --set driver.version=%s", s.Release, chart, v2)
	upErr := make(chan error, 1)
	go func() {
		_, err := h.Upgrade(ctx, s.Release, s.values(v2), testbed.InstallOptions{Timeout: 10 * time.Minute})
		upErr <- err
	}()
	if err := s.waitSome(ctx, "the first nodes drained, waiting for approval (nothing reboots before it)", func(n *corev1.Node) bool {
		return n.Labels[s.keys.UpgradeState()] == string(contract.StateRebootRequired)
	}); err != nil {
		return err
	}
	if err := s.shell(ctx, "kubectl get nodes -l openfuyao.com/npu.present=true -L npu.openfuyao.com/driver-upgrade-state"); err != nil {
		return err
	}
	if err := s.shell(ctx, "kubectl get nodes -l openfuyao.com/npu.present=true -o name | xargs -I{} kubectl annotate {} npu.openfuyao.com/approve-reboot=true --overwrite"); err != nil {
		return err
	}
	if err := <-upErr; err != nil {
		return err
	}
	if err := s.expect(ctx, v2); err != nil {
		return err
	}
	if err := s.realUpgraded(ctx, v2); err != nil {
		return err
	}
	if err := s.shell(ctx, "kubectl get events -A --field-selector reason=RebootRequired -o custom-columns=NODE:.involvedObject.name,MESSAGE:.message"); err != nil {
		return err
	}
	if err := s.timeline(ctx, "2-upgrade"); err != nil {
		return err
	}

	victim := s.Fleet.NPU[0]
	s.title("3/4 self-healing: chip 3 of %s wedges; autoRecover reboots it", victim.Name())
	if err := s.heal(ctx, victim.Name(), func() error { return victim.Host().Wedge(3) }); err != nil {
		return err
	}
	if len(s.Fleet.Real) > 0 {
		real := s.Fleet.Real[0]
		s.title("3/4 self-healing on real node %s: npu-smi reports chip 3 Critical (chips.json)", real.Name())
		if err := s.heal(ctx, real.Name(), func() error { return real.SetChipHealth(3, "Critical") }); err != nil {
			return err
		}
		s.reboots[real.Name()]++
		if err := s.realServing(ctx, false); err != nil {
			return err
		}
		if err := s.checkReal(v2); err != nil {
			return err
		}
		// The recovery drained the node: the workload is back on a new pod.
		uid, err := s.workloadRunning(ctx, real, s.workloads[real.Name()], v2)
		if err != nil {
			return err
		}
		s.workloads[real.Name()] = uid
	}

	s.title("4/4 rollback: helm rollback %s 1 (back to %s), approved up front", s.Release, v1)
	if err := s.shell(ctx, "kubectl get nodes -l openfuyao.com/npu.present=true -o name | xargs -I{} kubectl annotate {} npu.openfuyao.com/approve-reboot=true --overwrite"); err != nil {
		return err
	}
	if err := h.Rollback(s.Release, 1, testbed.InstallOptions{Timeout: 10 * time.Minute}); err != nil {
		return err
	}
	if err := s.expect(ctx, v1); err != nil {
		return err
	}
	if err := s.realUpgraded(ctx, v1); err != nil {
		return err
	}
	if err := s.timeline(ctx, "4-rollback"); err != nil {
		return err
	}
	return s.summary()
}

func (s *Story) values(version string) map[string]any { return s.Fleet.Values(version) }

// realUpgraded checks the real nodes after a driver change to version:
// each rebooted once more, serving its chips with the stack running, and
// the workload's pod evicted by the drain and replaced by one that got its
// chip again.
func (s *Story) realUpgraded(ctx context.Context, version string) error {
	if len(s.Fleet.Real) == 0 {
		return nil
	}
	for _, n := range s.Fleet.Real {
		s.reboots[n.Name()]++
	}
	if err := s.realServing(ctx, false); err != nil {
		return err
	}
	if err := s.checkReal(version); err != nil {
		return err
	}
	return s.workloadsRunning(ctx, version)
}

// heal wedges a chip of node name and waits for automatic recovery: the
// wedge reported, the node rebooted, its driver ready and uncordoned, with
// the events that tell it.
func (s *Story) heal(ctx context.Context, name string, wedge func() error) error {
	boot := s.bootID(ctx, name)
	if err := wedge(); err != nil {
		return err
	}
	if err := s.waitNode(ctx, name, "wedge detected (reboot-required, reason=recovery)", func(n *corev1.Node) bool {
		return n.Labels[s.keys.RebootRequired()] == contract.True && n.Annotations[s.keys.RebootReason()] == string(contract.ReasonRecovery)
	}); err != nil {
		return err
	}
	if err := s.waitNode(ctx, name, "rebooted, driver ready, uncordoned", func(n *corev1.Node) bool {
		return n.Status.NodeInfo.BootID != boot && n.Labels[s.keys.DriverReady()] == contract.True &&
			n.Labels[s.keys.RebootRequired()] == "" && !n.Spec.Unschedulable
	}); err != nil {
		return err
	}
	return s.shell(ctx, "kubectl get events -A --field-selector involvedObject.name="+name+" -o custom-columns=REASON:.reason,MESSAGE:.message | grep -E 'ChipWedged|RebootRequired|RebootCompleted'")
}

func (s *Story) title(format string, args ...any) {
	s.printf("\n== %s  (+%s)\n", fmt.Sprintf(format, args...), s.elapsed())
}

// printf writes progress; a closed terminal must not stop the demo's
// cleanup, so write errors are ignored.
func (s *Story) printf(format string, args ...any) { _, _ = fmt.Fprintf(s.Out, format, args...) }

func (s *Story) elapsed() string {
	return time.Since(s.start).Truncate(100 * time.Millisecond).String()
}

// expect checks every NPU node runs version, with no state left.
func (s *Story) expect(ctx context.Context, version string) error {
	return s.waitAll(ctx, "every node on driver "+version, func(n *corev1.Node) bool {
		return n.Labels[s.keys.DriverVersion()] == version && n.Labels[s.keys.UpgradeState()] == "" && !n.Spec.Unschedulable
	})
}

func (s *Story) npuLW() cache.ListerWatcher {
	return cache.NewFilteredListWatchFromClient(s.Env.Client.CoreV1().RESTClient(), "nodes", "", func(o *metav1.ListOptions) {
		o.LabelSelector = contract.LabelNPUPresent + "=true"
	})
}

func (s *Story) waitAll(ctx context.Context, what string, cond func(*corev1.Node) bool) error {
	err := testbed.WaitFor(ctx, s.npuLW(), &corev1.Node{}, func(ns []*corev1.Node) (bool, error) {
		for _, n := range ns {
			if !cond(n) {
				return false, nil
			}
		}
		return len(ns) == s.Fleet.Size(), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	s.printf("   ✓ %s (+%s)\n", what, s.elapsed())
	return nil
}

// waitSome waits until cond holds for at least one NPU node.
func (s *Story) waitSome(ctx context.Context, what string, cond func(*corev1.Node) bool) error {
	err := testbed.WaitFor(ctx, s.npuLW(), &corev1.Node{}, func(ns []*corev1.Node) (bool, error) {
		for _, n := range ns {
			if cond(n) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	s.printf("   ✓ %s (+%s)\n", what, s.elapsed())
	return nil
}

func (s *Story) waitNode(ctx context.Context, name, what string, cond func(*corev1.Node) bool) error {
	lw := cache.NewFilteredListWatchFromClient(s.Env.Client.CoreV1().RESTClient(), "nodes", "", func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + name
	})
	if err := testbed.WaitFor(ctx, lw, &corev1.Node{}, func(ns []*corev1.Node) (bool, error) { return len(ns) == 1 && cond(ns[0]), nil }); err != nil {
		return fmt.Errorf("%s: waiting for %s: %w", name, what, err)
	}
	s.printf("   ✓ %s: %s (+%s)\n", name, what, s.elapsed())
	return nil
}

func (s *Story) bootID(ctx context.Context, name string) string {
	n, err := s.Env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return n.Status.NodeInfo.BootID
}

// shell runs a documented command line verbatim and shows it with its
// output.
func (s *Story) shell(ctx context.Context, line string) error {
	s.printf("   $ %s\n", line)
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.Env.Kubeconfig, "PATH="+s.Env.BinDir+":"+s.Env.ProductBinDir+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		s.printf("     %s\n", l)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", line, err)
	}
	return nil
}

// watchNodes prints every upgrade-state change and reboot with a
// progress bar of nodes on the newest driver seen.
func (s *Story) watchNodes(ctx context.Context) func() {
	var mu sync.Mutex
	last := map[string]string{}
	boots := map[string]string{}
	report := func(n *corev1.Node) {
		mu.Lock()
		defer mu.Unlock()
		st := s.stats[n.Name]
		if st == nil {
			return
		}
		state := n.Labels[s.keys.UpgradeState()]
		if b := n.Status.NodeInfo.BootID; boots[n.Name] != "" && b != boots[n.Name] {
			st.reboots++
			s.printf("   %8s  %-12s rebooted\n", "+"+s.elapsed(), n.Name)
		}
		boots[n.Name] = n.Status.NodeInfo.BootID
		prev, seen := last[n.Name]
		if seen && prev == state {
			return
		}
		last[n.Name] = state
		now := time.Now()
		if state != "" && st.since.IsZero() {
			st.since = now
		}
		if state == "" && !st.since.IsZero() {
			st.busy += now.Sub(st.since)
			st.since = time.Time{}
		}
		if !seen && state == "" {
			return
		}
		shown := state
		if shown == "" {
			shown = "done (driver " + n.Labels[s.keys.DriverVersion()] + ")"
		}
		s.printf("   %8s  %-12s %-26s %s\n", "+"+s.elapsed(), n.Name, shown, s.bar(last))
	}
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: s.npuLW(), ObjectType: &corev1.Node{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { report(o.(*corev1.Node)) },
			UpdateFunc: func(_, o any) { report(o.(*corev1.Node)) },
		}})
	stopCh := make(chan struct{})
	go ctrl.Run(stopCh)
	return func() { close(stopCh) }
}

// bar draws how many nodes are idle (no upgrade state) out of all.
func (s *Story) bar(states map[string]string) string {
	idle := 0
	for _, st := range states {
		if st == "" {
			idle++
		}
	}
	total := s.Fleet.Size()
	width := 20
	filled := idle * width / total
	return fmt.Sprintf("[%s%s] %d/%d idle", strings.Repeat("#", filled), strings.Repeat(".", width-filled), idle, total)
}

func (s *Story) summary() error {
	s.printf("\n== summary (total %s)\n", s.elapsed())
	s.printf("%-14s %-8s %-9s %-8s %s\n", "NODE", "PROFILE", "DRIVER", "REBOOTS", "TIME IN UPGRADES")
	var names []string
	for name := range s.stats {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		st := s.stats[name]
		driver, reboots, err := s.nodeDriver(name)
		if err != nil {
			return err
		}
		s.printf("%-14s %-8s %-9s %-8d %s\n", name, st.profile, driver, reboots, st.busy.Truncate(100*time.Millisecond))
	}
	return nil
}
