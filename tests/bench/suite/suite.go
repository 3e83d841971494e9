// Package suite is `make bench`: the scenario matrix of a mode, one
// control plane per fleet size, the node-agent measurement, and the
// report files.
package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/openfuyao/npu-stack/tests/bench/agents"
	"github.com/openfuyao/npu-stack/tests/bench/apicount"
	"github.com/openfuyao/npu-stack/tests/bench/fleet"
	"github.com/openfuyao/npu-stack/tests/bench/report"
	"github.com/openfuyao/npu-stack/tests/bench/scenario"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// Realistic is the scaled realistic per-node time: a real node spends
// about 10 minutes (drain 2, reboot 6, driver load 2); scaled 1:30.
var Realistic = fleet.Timing{Reboot: 16 * time.Second, DriverLoad: 4 * time.Second}

// Scaled is the time scale of every scenario but the unscaled one: the
// realistic time's 1:30, the peer's timers compressed alike.
const Scaled = 1.0 / 30

// Unscaled is the per-node time of BENCH=realistic: 300 s, a fast real
// node upgrade (reboot and drain 240 s, driver load 60 s), in real time.
var Unscaled = fleet.Timing{Reboot: 240 * time.Second, DriverLoad: 60 * time.Second}

var (
	one       = scenario.Parallelism{Label: "1", Fixed: 1}
	two       = scenario.Parallelism{Label: "2", Fixed: 2}
	tenPct    = scenario.Parallelism{Label: "10%", Fraction: 0.1}
	unlimited = scenario.Parallelism{Label: "unlimited"}
)

// Fleet is the scenarios run on one fleet size.
type Fleet struct {
	Nodes int
	// PeerApart gives the peer N nodes of its own beside npu-stack's (for
	// scenarios run together).
	PeerApart bool
	Specs     []scenario.Spec
}

// heartbeat is the Lease renewal period of the simulated kubelets and the
// controller manager's grace period for a fleet of n nodes. Up to 500
// nodes: 20 s and the default 50 s. Beyond, renewals stay at 25 writes a
// second and the grace period is six renewal periods: a real fleet of
// 1,000 nodes has a control plane sized for its 100 renewals a second,
// the 2-core test machine running the fleet as well does not, and the
// renewals are not what is measured. At 50 a second the renewals fall
// behind on this machine (32 in flight cannot keep up with the API
// server's latency), the node lifecycle controller marks up nodes' pods
// not Ready, and the Ready written back makes the rollout re-roll device
// plugins: load and writes of the test bed's making, counted against the
// rollout.
func heartbeat(n int) (every, grace time.Duration) {
	every = fleet.DefaultHeartbeatEvery
	if n <= 500 {
		return every, 0
	}
	every *= time.Duration((n + 499) / 500)
	return every, 6 * every
}

// peerSampleOne is how many nodes the peer upgrades at parallelism 1
// before its wall is projected to the fleet.
const peerSampleOne = 10

// Plan is what a mode runs.
type Plan struct {
	Mode   string
	Fleets []Fleet
	// AgentIdle is the idle window of the node agents (0: the agents are
	// not measured).
	AgentIdle time.Duration
	Notes     []string
}

// PlanFor returns the plan of mode "quick", "full" or "realistic".
func PlanFor(mode string) (Plan, error) {
	spec := func(p scenario.Parallelism, t fleet.Timing) scenario.Spec {
		return scenario.Spec{Parallelism: p, Timing: t, Timeout: time.Hour, TimeScale: Scaled}
	}
	// withPeer runs the peer after npu-stack in the same scenario.
	withPeer := func(p scenario.Parallelism, t fleet.Timing) scenario.Spec {
		s := spec(p, t)
		s.Peer = true
		return s
	}
	// together runs both at once, each on its own fleet.
	together := func(s scenario.Spec) scenario.Spec {
		s.Peer, s.Together = true, true
		return s
	}
	zero := fleet.Timing{}
	sampled := func(s scenario.Spec, n int) scenario.Spec {
		s.PeerSample = n
		return s
	}
	switch mode {
	case "quick":
		second := fleet.Timing{Reboot: 800 * time.Millisecond, DriverLoad: 200 * time.Millisecond}
		return Plan{Mode: mode, AgentIdle: 10 * time.Second, Fleets: []Fleet{{Nodes: 100, PeerApart: true, Specs: []scenario.Spec{
			withPeer(unlimited, zero), spec(tenPct, second), together(spec(tenPct, second)),
		}}}}, nil
	case "realistic":
		s := together(scenario.Spec{Parallelism: two, Timing: Unscaled, Timeout: 2 * time.Hour, TimeScale: 1})
		return Plan{Mode: mode, Fleets: []Fleet{{Nodes: 10, PeerApart: true, Specs: []scenario.Spec{s}}},
			Notes: []string{"BENCH=realistic runs in real time: N = 10, 300 s per node (reboot and drain 240 s, driver load 60 s), maxParallelUpgrades 2, the peer's timers unscaled (its planned requeue 2 min); npu-stack and the peer upgrade fleets of their own in the same control plane at the same time, their clocks started at one instant."}}, nil
	case "full":
		return Plan{Mode: mode, AgentIdle: 2 * time.Minute,
			Fleets: []Fleet{
				// Parallelism 1 last: the peer is stopped after its sample
				// and leaves the fleet half upgraded.
				{Nodes: 100, Specs: []scenario.Spec{withPeer(tenPct, zero), withPeer(unlimited, zero), withPeer(tenPct, Realistic),
					withPeer(unlimited, Realistic), sampled(withPeer(one, zero), peerSampleOne)}},
				{Nodes: 1000, Specs: []scenario.Spec{withPeer(tenPct, zero), withPeer(unlimited, zero), withPeer(tenPct, Realistic), withPeer(unlimited, Realistic)}},
				{Nodes: 5000, Specs: []scenario.Spec{spec(unlimited, zero), spec(tenPct, Realistic)}},
				{Nodes: 10000, Specs: []scenario.Spec{spec(tenPct, Realistic)}},
			},
			Notes: []string{
				"Parallelism 1 runs only at N = 100 with per-node time 0: with the realistic time its physical limit alone is N × 20 s (33 min at N = 100). With one node at a time the peer waits for its planned requeue (4 s at 1:30) about twice per node, so the benchmark stops it after its first " + fmt.Sprint(peerSampleOne) + " nodes and projects its wall to the fleet at that pace (marked \"projected\"); its requests per node are those of the sample.",
				"The peer runs at N = 100 and 1,000, not at 5,000 or 10,000.",
				"N = 5,000 runs two scenarios (pure overhead with unlimited parallelism, realistic time at 10%) and N = 10,000 one (realistic time at 10%), npu-stack alone; node Leases are renewed every 20 s up to 500 nodes against the default grace period of 50 s, beyond that every 20 s per 500 nodes against six renewal periods (40 s against 240 s at N = 1,000, 200 s against 1,200 s at N = 5,000, 400 s against 2,400 s at N = 10,000).",
			},
		}, nil
	}
	return Plan{}, fmt.Errorf("BENCH=%q: want quick, realistic or full", mode)
}

// Only keeps the fleets of the given sizes (none given: all), to re-run
// one fleet size of a plan; a size the plan does not have is an error,
// except in quick mode, whose one fleet takes any one size (a smaller
// fleet for a faster check).
func (p Plan) Only(sizes []int) (Plan, error) {
	if len(sizes) == 0 {
		return p, nil
	}
	if p.Mode == "quick" && len(sizes) == 1 && len(p.Fleets) == 1 {
		p.Fleets = []Fleet{p.Fleets[0]}
		p.Fleets[0].Nodes = sizes[0]
		return p, nil
	}
	var kept []Fleet
	for _, n := range sizes {
		found := false
		for _, f := range p.Fleets {
			if f.Nodes == n {
				kept, found = append(kept, f), true
			}
		}
		if !found {
			var have []string
			for _, f := range p.Fleets {
				have = append(have, fmt.Sprint(f.Nodes))
			}
			return p, fmt.Errorf("mode %s has no fleet of %d nodes (it has %s)", p.Mode, n, strings.Join(have, ", "))
		}
	}
	p.Fleets = kept
	return p, nil
}

// Config runs a Plan.
type Config struct {
	Plan Plan
	// RolloutArgs are added to every rollout's arguments.
	RolloutArgs []string
	OutDir      string
	// KeepControlPlane keeps each control plane's directory (its
	// components' logs, KWOK's among them) under OutDir instead of a
	// temporary directory removed at the end.
	KeepControlPlane bool
	Log              *logrus.Logger
}

// Run runs the plan and writes results.md and results.json to OutDir. It
// fails only on broken function.
func Run(ctx context.Context, cfg Config) (report.Report, error) {
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return report.Report{}, fmt.Errorf("output dir %s: %w", cfg.OutDir, err)
	}
	commit, err := commitOf(ctx)
	if err != nil {
		return report.Report{}, err
	}
	r := report.Report{Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Commit: commit, Mode: cfg.Plan.Mode, Machine: machine(), Notes: cfg.Plan.Notes}
	r.Notes = append(r.Notes, fixedNotes...)
	peerBin, err := peerFor(ctx, cfg.Plan, &r)
	if err != nil {
		return r, err
	}
	binDir, err := filepath.Abs(filepath.Join(cfg.OutDir, "bin"))
	if err != nil {
		return r, fmt.Errorf("output dir: %w", err)
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return r, fmt.Errorf("output dir %s: %w", binDir, err)
	}
	proxyBin, err := apicount.Build(ctx, binDir)
	if err != nil {
		return r, err
	}
	for i, f := range cfg.Plan.Fleets {
		scen, err := runFleet(ctx, cfg, f, i == 0 && cfg.Plan.AgentIdle > 0, hasPeer(f, peerBin), proxyBin, &r)
		r.Scenarios = append(r.Scenarios, scen...)
		if err != nil {
			_ = write(cfg.OutDir, r)
			return r, err
		}
	}
	r.Targets = report.Targets(r)
	return r, write(cfg.OutDir, r)
}

var fixedNotes = []string{
	"Per-node time is simulated: reboot (drain included: the simulated nodes' ordinary pods need no eviction) plus driver load; the realistic time is a 10-minute node upgrade scaled 1:30 (time scale 1:30), BENCH=realistic's 300 s are unscaled.",
	"Wall time in the first table runs from the start of `npu-hooks rollout` (a real process, run with the chart's hook arguments) to its exit; the comparison with the peer uses the clock both sides share, from the version bump to the last node seen done by the benchmark's watch, the driver DaemonSet replacing its pods and the rollout's start-up inside it.",
	"Requests are counted by a proxy process of their own between `npu-hooks rollout` and the API server (another one for the peer); writes include the Events it records (one NPUDriverUpgrade per node patch that changes the state, naming every state it passes; RebootRequired) and its Lease renewals (its 15 s lease, renewed every 3 s, unscaled). `delete pods` are the re-roll of device-plugin and exporter pods found started before their node's driver was ready.",
	"Step latency: receive times of the node and pod watches of the benchmark process (Go monotonic clock), from what allowed a step to the rollout's write taking it seen; it includes the rollout's queueing behind other nodes' steps and the API server's latency under the load of the whole fleet. The rollout takes every transition the cluster allows in one node patch (e.g. no state → reboot-required, validation-required → up to date), so a step counts only where something had to happen first: budget freed (a queued node admitted after a node in progress finished), boot ID changed (leaving reboot-required), driver-ready and pods Ready again (leaving validation-required: the node's driver-ready=true with the new version and its driver, device-plugin and exporter pods Ready again after the reboot, whichever came last), driver ready → re-roll (the deletion of pods started before the driver was ready); previous step done only for a state the rollout left in a write of its own.",
	"The node side (rebooter, driver entry, health-watch of every KWOK node) is played in the benchmark process with the product's pure decision functions on in-memory hosts and unlimited reboot slots; KWOK keeps the nodes Ready during their simulated reboot. The real agents are separate processes, so one pass of a simulated node plays each of them on the node its predecessor's write returned, without a watch round trip between them, and the driver load runs from the boot.",
	"The benchmark also plays the kubelet's part in a reboot: a new boot ID, and the node's pods of the chart namespace restarted in place (same pod UID), not re-created. From the boot the device-plugin and exporter pods are held not Ready, their containers waiting as behind their `validate --wait` init container; the driver pod restarts once the driver load completes; the held pods start once the driver pod is Ready again and the node has driver-ready=true. A hold and a start are one write each to the pod's status (the start: Running and Ready, containers started now, restart count one up), so the pods start after the driver became ready and the rollout has nothing to re-roll. The driver pod shows the Ready of the previous boot until the driver load completes (the rollout waits for the new driver-version label meanwhile). Pods the node lifecycle controller marked not Ready (a late Lease renewal) get their Ready written back, as a kubelet's status sync does.",
}

func runFleet(ctx context.Context, cfg Config, f Fleet, agents bool, peerBin, proxyBin string, r *report.Report) ([]report.Scenario, error) {
	log := cfg.Log.WithField("nodes", f.Nodes)
	dir := filepath.Join(cfg.OutDir, fmt.Sprintf("n%d", f.Nodes))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("log dir %s: %w", dir, err)
	}
	log.Info("starting a control plane")
	var err error
	var opts testbed.Options
	beat, grace := heartbeat(f.Nodes)
	opts.NodeMonitorGracePeriod = grace
	if cfg.KeepControlPlane {
		if opts.Dir, err = os.MkdirTemp(dir, "controlplane-"); err != nil {
			return nil, fmt.Errorf("control plane dir: %w", err)
		}
		log.WithField("dir", opts.Dir).Info("keeping the control plane's directory")
	}
	env, err := testbed.NewEnv(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("test bed for %d nodes: %w", f.Nodes, err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			log.WithError(err).Warn("stop the control plane")
		}
	}()
	if agents {
		log.Info("measuring one rebooter and one health-watch")
		ag, wedge, err := measureAgents(ctx, env, dir, cfg.Plan.AgentIdle, cfg.Log)
		if err != nil {
			return nil, err
		}
		r.Agents, r.Wedge = ag, wedge
	}
	start := time.Now()
	bed, err := scenario.Setup(ctx, scenario.Config{Env: env, Nodes: f.Nodes, Dir: dir, HeartbeatEvery: beat, PeerBinary: peerBin,
		PeerApart: f.PeerApart && peerBin != "", ProxyBinary: proxyBin, Log: log})
	if err != nil {
		return nil, err
	}
	defer bed.Close()
	log.WithField("took", time.Since(start).Round(time.Second)).Info("fleet installed")
	var out []report.Scenario
	for _, spec := range f.Specs {
		slog := log.WithFields(logrus.Fields{"parallelism": spec.Parallelism.Label, "perNode": spec.Timing.Total(), "together": spec.Together})
		slog.Info("rollout")
		spec.ExtraArgs = cfg.RolloutArgs
		s, err := bed.Run(ctx, spec)
		if err != nil {
			return out, fmt.Errorf("scenario N=%d parallelism %s per-node %s: %w", f.Nodes, spec.Parallelism.Label, spec.Timing.Total(), err)
		}
		s.RolloutProfiles = relativeTo(cfg.OutDir, s.RolloutProfiles)
		slog.WithFields(logrus.Fields{"wall": fmt.Sprintf("%.1fs", s.Wall), "fromBump": fmt.Sprintf("%.1fs", s.FromBump()), "writesPerNode": fmt.Sprintf("%.1f", s.WritesPerNode()),
			"peakMiB": fmt.Sprintf("%.0f", s.RolloutPeakMB), "stepP99": fmt.Sprintf("%.3fs", s.Steps.P99),
			"cpuPerNode": fmt.Sprintf("%.2fms", s.CPUPerNodeMs()), "peakGoroutines": s.RolloutPeakGoroutines,
			"podsRestartedInPlace": s.SimPodRestarts,
			"heartbeatMaxLag":      fmt.Sprintf("%.1fs", s.SimHeartbeatMaxLag)}).Info("rollout done")
		if p := s.Peer; p != nil {
			slog.WithFields(logrus.Fields{"peerWall": fmt.Sprintf("%.1fs", p.Wall), "ratio": fmt.Sprintf("%.3f", s.PeerRatio()),
				"peerWritesPerNode": fmt.Sprintf("%.1f", p.WritesPerNode()), "peerReconciles": p.Reconciles}).Info("peer done")
		}
		out = append(out, s)
		// Written after every scenario: a 5,000-node fleet takes an hour,
		// and a run stopped midway keeps what it measured.
		partial := *r
		partial.Scenarios = append(append([]report.Scenario(nil), r.Scenarios...), out...)
		partial.Targets = report.Targets(partial)
		if err := write(cfg.OutDir, partial); err != nil {
			slog.WithError(err).Warn("write the results so far")
		}
	}
	return out, nil
}

// relativeTo makes paths relative to dir, the results' directory, so the
// report names its profiles wherever the directory is moved; a path that
// cannot be made relative stays as it is.
func relativeTo(dir string, paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		if r, err := filepath.Rel(dir, p); err == nil {
			p = r
		}
		out = append(out, p)
	}
	return out
}

func write(dir string, r report.Report) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(report.Markdown(r)), 0o644); err != nil {
		return fmt.Errorf("write results.md: %w", err)
	}
	return nil
}

func machine() report.Machine {
	m := report.Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), Kubernetes: "v1.37.1 (local control plane, KWOK nodes)", OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

func measureAgents(ctx context.Context, env *testbed.Env, dir string, idle time.Duration, log logrus.FieldLogger) ([]report.Agent, *report.Wedge, error) {
	return agents.Measure(ctx, agents.Config{Env: env, Dir: dir, Idle: idle, Log: log})
}
