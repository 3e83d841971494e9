package scenario

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/bench/fleet"
	"github.com/openfuyao/npu-stack/tests/bench/peerrun"
	"github.com/openfuyao/npu-stack/tests/bench/procstat"
	"github.com/openfuyao/npu-stack/tests/bench/report"
	"github.com/openfuyao/npu-stack/tests/bench/steplat"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// Spec is one scenario on a Bed.
type Spec struct {
	Parallelism Parallelism
	Timing      fleet.Timing
	// TimeScale is the fleet's time scale, simulated seconds per real
	// second (1: real time; 1/30: a 10-minute node upgrade in 20 s). The
	// peer's timers are multiplied by it; npu-stack has no timer that
	// paces a rollout.
	TimeScale float64
	// Timeout bounds the rollout process.
	Timeout time.Duration
	// ExtraArgs are appended to the chart's rollout arguments (to try a
	// setting before changing a default).
	ExtraArgs []string
	// Peer runs the same upgrade by the peer (the Bed must have been set
	// up with a PeerBinary): after npu-stack's on the same nodes, or, with
	// Together, at the same time on a fleet of its own (a Bed set up with
	// PeerApart). PeerTimeout bounds it (0: from the waves of the
	// scenario).
	Peer        bool
	Together    bool
	PeerTimeout time.Duration
	// PeerSample, if set, stops the peer once that many nodes are done
	// and projects its wall to the fleet: with one node at a time the
	// peer waits for its planned requeue once per node.
	PeerSample int
}

// Run upgrades the whole fleet to the next driver version the way `helm
// upgrade --wait` with the rollout hook does, and measures the rollout,
// then the peer's upgrade (or both at once, with spec.Together). An error
// means broken function (the rollout failed or left a node behind, the
// peer stalled), never a slow run.
func (b *Bed) Run(ctx context.Context, spec Spec) (report.Scenario, error) {
	if spec.Together {
		return b.runTogether(ctx, spec)
	}
	out, err := b.runNPUStack(ctx, spec, peerrun.Now)
	if err != nil || !spec.Peer {
		return out, err
	}
	out.Peer, err = b.runPeer(ctx, spec, peerrun.Now)
	if err != nil {
		return out, fmt.Errorf("%s: %w", out.Name(), err)
	}
	return out, nil
}

// runNPUStack is npu-stack's upgrade. Its clock starts when gate returns,
// with the helm upgrade that bumps the driver version, and stops when the
// benchmark's node watch sees the last node upgraded: the DaemonSet
// replacing the driver pods (what `helm upgrade --wait` waits for before
// the hook) and the rollout process's start-up are inside it.
func (b *Bed) runNPUStack(ctx context.Context, spec Spec, gate peerrun.Gate) (report.Scenario, error) {
	n := b.cfg.Nodes
	eff := spec.Parallelism.Effective(n)
	out := report.Scenario{Nodes: n, Parallelism: spec.Parallelism.Label, Effective: eff, PerNode: report.S(spec.Timing.Total()),
		Limit: report.S(PhysicalLimit(n, eff, spec.Timing.Total())), TimeScale: spec.TimeScale, Together: spec.Together,
		PeerOwnFleet: b.cfg.PeerApart}
	b.versions++
	version := fmt.Sprintf("1.%d.0", b.versions)
	b.sim.SetTiming(spec.Timing)
	drv := b.vals["driver"].(map[string]any)
	drv["version"] = version
	pol := drv["upgradePolicy"].(map[string]any)
	pol["maxParallelUpgrades"] = spec.Parallelism.MaxParallelUpgrades(n)

	done, stopWatch := b.watchUpgraded(ctx, version)
	defer stopWatch()
	upStart := gate()
	cpu0, err := b.apiServerCPU()
	if err != nil {
		return out, err
	}
	rel, err := b.cfg.Env.Helm(Namespace).Upgrade(ctx, release0, b.vals, testbed.InstallOptions{DisableHooks: true})
	if err != nil {
		return out, fmt.Errorf("helm upgrade to driver %s: %w", version, err)
	}
	args, env, err := rolloutCommand(rel)
	if err != nil {
		return out, err
	}
	if err := b.waitDaemonSets(ctx, true); err != nil {
		return out, err
	}
	out.DriverRollout = report.S(time.Since(upStart))

	b.rec.Take()
	if _, err := b.proxy.Snapshot(ctx); err != nil {
		return out, err
	}
	simBefore := b.sim.Stats()
	mark, err := b.markLoad(ctx)
	if err != nil {
		return out, err
	}
	base := fmt.Sprintf("rollout-n%d-p%s-t%s", n, strings.TrimSuffix(spec.Parallelism.Label, "%"), spec.Timing.Total())
	if spec.Together {
		// Its own files: quick runs the same scenario alone before.
		base += "-together"
	}
	logPath, profDir := filepath.Join(b.cfg.Dir, base+".log"), filepath.Join(b.cfg.Dir, base+".profile")
	wall, usage, left, err := b.rollout(ctx, append(append(args, spec.ExtraArgs...), profileArg(profDir)), env, logPath, spec.Timeout)
	if err != nil {
		return out, err
	}
	if err := readProfile(&out, profDir); err != nil {
		return out, err
	}
	doneAt, err := done(time.Minute)
	if err != nil {
		return out, fmt.Errorf("the rollout exited 0 but the nodes are not seen upgraded: %w", err)
	}
	out.FromBumpWall = report.S(doneAt.Sub(upStart))
	if out.APIServerCPU, err = b.apiServerCPUSince(cpu0, doneAt.Sub(upStart)); err != nil {
		return out, err
	}
	out.APIServerIdleCores = b.idleAPIServer
	out.LeftBehind = left
	out.Passes = decisionPasses(logPath)
	out.Wall, out.RolloutCPU, out.RolloutPeakMB = report.S(wall), report.S(usage.CPU), procstat.MiB(usage.PeakRSS)
	load, err := b.loadSince(ctx, mark, "npu-hooks rollout", usage.CPU, b.flow)
	if err != nil {
		return out, err
	}
	out.API, out.CPU, out.APIServerOwnCPU, out.APIServerOwnShare = load.api, load.cpu, &load.ownAPIServerCPU, load.ownShare
	simAfter := b.sim.Stats()
	out.SimWrites = simAfter.Writes - simBefore.Writes
	out.SimPodRestarts = simAfter.PodRestarts - simBefore.PodRestarts
	out.SimHeartbeatMaxLag = report.S(simAfter.HeartbeatMaxLag)

	if out.Upgraded, err = b.checkUpgraded(ctx, version); err != nil {
		return out, err
	}
	out.RolloutCPUPerNodeMs = cpuPerNodeMs(out.RolloutCPU, out.Upgraded)
	counts, err := b.proxy.Snapshot(ctx)
	if err != nil {
		return out, err
	}
	out.Requests = reportCounts(counts)
	timelines := b.rec.Take()
	if out.InProgress, err = concurrency(steplat.InProgress(timelines, doneAt), eff, upStart, strings.TrimSuffix(logPath, ".log")+".inprogress.tsv"); err != nil {
		return out, err
	}
	lat := steplat.Analyze(timelines, version, eff)
	cycle := steplat.MeanCycle(steplat.Cycles(timelines, version))
	out.CycleMean, out.CycleRollout = report.S(cycle.Total), report.S(cycle.Rollout)
	out.Steps = latency(lat.All())
	out.StepsByWhy = map[string]report.Latency{}
	for k, ds := range lat {
		out.StepsByWhy[string(k)] = latency(sorted(ds))
	}
	if err := b.waitSettled(ctx, version); err != nil {
		return out, err
	}
	return out, checkFunction(out)
}

// watchUpgraded starts watching the fleet's N nodes until stop; wait
// waits (at most the given time longer) until every one of them is on
// version with no upgrade state and schedulable, and returns when the
// benchmark's watch saw the last of them so: the same kind of event as
// the one that stops the peer's clock.
func (b *Bed) watchUpgraded(ctx context.Context, version string) (wait func(time.Duration) (time.Time, error), stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var at time.Time
	result := make(chan error, 1)
	sel := labels.SelectorFromSet(labels.Set{contract.LabelNPUPresent: contract.True, healthyLabel: contract.True}).String()
	go func() {
		result <- testbed.WaitFor(ctx, cache.NewFilteredListWatchFromClient(b.cfg.Env.Client.CoreV1().RESTClient(), "nodes", "", func(o *metav1.ListOptions) {
			o.LabelSelector = sel
		}), &corev1.Node{}, func(nodes []*corev1.Node) (bool, error) {
			ok := 0
			for _, nd := range nodes {
				if upgraded(nd, version) {
					ok++
				}
			}
			if ok == b.cfg.Nodes && len(nodes) == b.cfg.Nodes {
				at = time.Now()
				return true, nil
			}
			return false, nil
		})
	}()
	return func(grace time.Duration) (time.Time, error) {
		select {
		case err := <-result:
			return at, err
		case <-time.After(grace):
			return time.Time{}, fmt.Errorf("not all %d nodes seen on driver %s within %s of the rollout's exit", b.cfg.Nodes, version, grace)
		}
	}, cancel
}

// rollout runs npu-hooks rollout with the chart's arguments, as the hook
// Job would, through the counting proxy. It returns the rollout's lines
// naming the nodes it left behind. Leaving the wedged node behind is the
// expected end, whether the rollout exits 0 for it or not
// (driver.upgradePolicy.nodesLeftBehind): a failure is any other
// non-zero exit.
func (b *Bed) rollout(ctx context.Context, args, env []string, logPath string, timeout time.Duration) (time.Duration, procstat.Usage, []string, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return 0, procstat.Usage{}, nil, fmt.Errorf("rollout log: %w", err)
	}
	defer func() { _ = logf.Close() }()
	all := append(append([]string{}, args...), "--kubeconfig="+b.kubecfg, "--lease-identity=npu-bench")
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.Command(filepath.Join(b.cfg.Env.ProductBinDir, "npu-hooks"), all...)
	cmd.Env = append(withoutKubeconfig(os.Environ()), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	// Its own peak, read at its exit: wait4's would be the benchmark's,
	// which holds every node and pod of the fleet.
	usage, err := procstat.RunToExit(ctx, cmd)
	wall := time.Since(start)
	left, onlyWedged := leftBehind(logPath, b.wedged)
	if err != nil && (ctx.Err() != nil || !onlyWedged) {
		return wall, usage, left, fmt.Errorf("npu-hooks rollout %s failed after %s: %w; log: %s\n%s", strings.Join(args, " "), wall.Round(time.Millisecond), err, logPath, tail(logPath, 20))
	}
	return wall, usage, left, nil
}

// passesField is the rollout's closing log field with its decision
// count, in logrus's text or JSON form.
var passesField = regexp.MustCompile(`"?decisionPasses"?[=:](\d+)`)

// decisionPasses reads how many decisions the rollout made from its log
// (0: not found).
func decisionPasses(logPath string) int {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return 0
	}
	m := passesField.FindAllSubmatch(data, -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(string(m[len(m)-1][1]))
	return n
}

// leftBehind are the rollout's summary lines naming a node it left
// behind ("left behind: NODE ..."); onlyWedged is true when they name
// the wedged node and no other.
func leftBehind(logPath, wedged string) (lines []string, onlyWedged bool) {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return nil, false
	}
	named := false
	onlyWedged = true
	for _, l := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(l, "left behind: ")
		if !ok {
			continue
		}
		lines = append(lines, l)
		node, _, _ := strings.Cut(rest, " ")
		if node == wedged {
			named = true
		} else {
			onlyWedged = false
		}
	}
	return lines, named && onlyWedged
}

// checkUpgraded verifies every node runs version with no upgrade state.
func (b *Bed) checkUpgraded(ctx context.Context, version string) (int, error) {
	nodes, err := b.cfg.Env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: contract.LabelNPUPresent + "=true"})
	if err != nil {
		return 0, fmt.Errorf("list the NPU nodes: %w", err)
	}
	var bad []string
	for _, nd := range nodes.Items {
		if nd.Name == b.wedged {
			// Left behind: its recovery waits for an approval.
			continue
		}
		if !upgraded(&nd, version) {
			bad = append(bad, fmt.Sprintf("%s (driver %q, state %q)", nd.Name, nd.Labels[keys.DriverVersion()], nd.Labels[keys.UpgradeState()]))
		}
	}
	if len(bad) > 0 || len(nodes.Items) != b.cfg.Nodes+1 {
		return 0, fmt.Errorf("the rollout ended but %d of %d nodes (the wedged %s aside) are not on driver %s: %s",
			len(bad), len(nodes.Items)-1, b.wedged, version, strings.Join(first(bad, 5), ", "))
	}
	return len(nodes.Items) - 1, nil
}

func upgraded(n *corev1.Node, version string) bool {
	return n.Labels[keys.DriverVersion()] == version && n.Labels[keys.UpgradeState()] == "" && !n.Spec.Unschedulable
}

// checkFunction fails a run whose counts show nothing was measured.
func checkFunction(s report.Scenario) error {
	switch {
	case s.Upgraded == 0:
		return fmt.Errorf("%s: no node upgraded", s.Name())
	case s.WritesPerNode() == 0 || s.Watches() == 0:
		return fmt.Errorf("%s: the counting proxy saw no writes or watches of the rollout", s.Name())
	case s.Steps.N == 0:
		return fmt.Errorf("%s: no step latency was recorded", s.Name())
	case s.RolloutPeakMB == 0:
		return fmt.Errorf("%s: no memory reading of the rollout process", s.Name())
	}
	return nil
}

func latency(sorted []time.Duration) report.Latency {
	if len(sorted) == 0 {
		return report.Latency{}
	}
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	return report.Latency{N: len(sorted), P50: report.S(steplat.Percentile(sorted, 0.5)), P99: report.S(steplat.Percentile(sorted, 0.99)),
		Max: report.S(sorted[len(sorted)-1]), Mean: report.S(sum / time.Duration(len(sorted)))}
}

func sorted(ds []time.Duration) []time.Duration {
	return steplat.Latencies{"": ds}.All()
}

func withoutKubeconfig(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "KUBECONFIG=") {
			out = append(out, e)
		}
	}
	return out
}

func first(xs []string, n int) []string { return xs[:min(n, len(xs))] }

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
