// Package agents measures one real npu-rebooter and one real
// npu-healthwatch process for one node on a directory-backed simulated
// host: CPU and memory while idle and through one reboot, and the
// health-watch's latency from a chip wedge to reboot-required.
package agents

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/agenthost"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/marker"
	"github.com/openfuyao/npu-stack/tests/bench/procstat"
	"github.com/openfuyao/npu-stack/tests/bench/report"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

const (
	namespace = "npu-agents"
	markerDir = "/run/npu-stack"
	// The chart's defaults.
	probeInterval = time.Minute
	threshold     = 3
	// The wedge test probes faster: the latency beyond the schedule does
	// not depend on the interval, the run time does.
	wedgeInterval = 2 * time.Second
	version       = "1.0.0"
)

var keys = contract.Keys{Domain: contract.DefaultDomain}

// Config is one measurement.
type Config struct {
	Env  *testbed.Env
	Dir  string
	Idle time.Duration
	Log  logrus.FieldLogger
}

// Measure runs the agents and returns their figures.
func Measure(ctx context.Context, cfg Config) ([]report.Agent, *report.Wedge, error) {
	env := cfg.Env
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return nil, nil, fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	// Not an NPU node (no npu.present label): no rollout picks it up.
	names, err := env.AddNodes(ctx, 1, "agent", map[string]string{contract.LabelChip: "910b"})
	if err != nil {
		return nil, nil, err
	}
	node := names[0]
	sim, err := simhost.Create(filepath.Join(cfg.Dir, "agent-host"), simhost.Spec{Chip: "910b", ChipCount: 8, Driver: version})
	if err != nil {
		return nil, nil, fmt.Errorf("simulated host of %s: %w", node, err)
	}
	m := &run{cfg: cfg, node: node, sim: sim, markers: marker.Dir{Path: sim.Path(markerDir)}}
	defer m.stopAll()
	if err := m.driverLoaded(); err != nil {
		return nil, nil, err
	}
	if err := m.setBootID(ctx); err != nil {
		return nil, nil, err
	}
	rb, err := m.start(ctx, "npu-rebooter", "run", "--node-name="+node, "--namespace="+namespace, "--auto-upgrade",
		"--uptime-guard=0s", "--slots=1")
	if err != nil {
		return nil, nil, err
	}
	hw, err := m.startWatch(ctx, probeInterval)
	if err != nil {
		return nil, nil, err
	}
	if err := m.waitNode(ctx, "driver-ready=true", func(n *corev1.Node) bool { return n.Labels[keys.DriverReady()] == contract.True }); err != nil {
		return nil, nil, err
	}
	rbAgent, hwAgent := report.Agent{Name: "npu-rebooter run"}, report.Agent{Name: "npu-healthwatch watch", ProbePeriod: report.S(probeInterval)}

	// Idle: a measurement window, nothing to wait for.
	r0, h0, err := sample2(rb, hw)
	if err != nil {
		return nil, nil, err
	}
	rbAgent.StartupCPU, hwAgent.StartupCPU = report.S(r0.CPU), report.S(h0.CPU)
	select {
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-time.After(cfg.Idle):
	}
	r1, h1, err := sample2(rb, hw)
	if err != nil {
		return nil, nil, err
	}
	rbAgent.IdleWindow, rbAgent.IdleCPU, rbAgent.IdlePeakMB = report.S(cfg.Idle), report.S(r1.CPU-r0.CPU), procstat.MiB(r1.PeakRSS)
	hwAgent.IdleWindow, hwAgent.IdleCPU, hwAgent.IdlePeakMB = report.S(cfg.Idle), report.S(h1.CPU-h0.CPU), procstat.MiB(h1.PeakRSS)

	// One upgrade reboot, as the rollout asks for it.
	busyStart := time.Now()
	if err := m.requestReboot(ctx); err != nil {
		return nil, nil, err
	}
	if err := m.waitReboot(ctx); err != nil {
		return nil, nil, err
	}
	// The machine reboots: the health-watch container dies with it and
	// starts again on the new boot; the rebooter process is kept, which
	// on a real node restarts too, so that one process covers the reboot
	// from request to completion.
	hw.stop()
	hwAfter := h1
	if _, err := sim.CompleteReboot(); err != nil {
		return nil, nil, fmt.Errorf("reboot the simulated host: %w", err)
	}
	if err := m.setBootID(ctx); err != nil {
		return nil, nil, err
	}
	hwBoot := time.Now()
	if hw, err = m.startWatch(ctx, probeInterval); err != nil {
		return nil, nil, err
	}
	if err := m.waitNode(ctx, "driver-ready=false on the fresh boot", func(n *corev1.Node) bool { return n.Labels[keys.DriverReady()] == contract.False }); err != nil {
		return nil, nil, err
	}
	if err := m.driverLoaded(); err != nil {
		return nil, nil, err
	}
	if err := m.waitNode(ctx, "reboot completed and driver-ready=true", func(n *corev1.Node) bool {
		return n.Labels[keys.DriverReady()] == contract.True && n.Labels[keys.RebootRequired()] == "" && n.Annotations[keys.RebootFromBootID()] == ""
	}); err != nil {
		return nil, nil, err
	}
	r2, h2, err := sample2(rb, hw)
	if err != nil {
		return nil, nil, err
	}
	rbAgent.Busy, rbAgent.BusyWindow, rbAgent.BusyCPU = "one upgrade reboot, request to completion", report.S(time.Since(busyStart)), report.S(r2.CPU-r1.CPU)
	rbAgent.PeakMB, rbAgent.AnonMB = procstat.MiB(r2.PeakRSS), procstat.MiB(r2.AnonRSS)
	hwAgent.Busy, hwAgent.BusyWindow, hwAgent.BusyCPU = "fresh boot to driver-ready=true (new process)", report.S(time.Since(hwBoot)), report.S(h2.CPU)
	hwAgent.PeakMB, hwAgent.AnonMB = max(procstat.MiB(hwAfter.PeakRSS), procstat.MiB(h2.PeakRSS)), procstat.MiB(h2.AnonRSS)
	if rbAgent.BaselineMB, err = helpRSS(ctx, cfg.Env.ProductBinDir, "npu-rebooter"); err != nil {
		return nil, nil, err
	}
	if hwAgent.BaselineMB, err = helpRSS(ctx, cfg.Env.ProductBinDir, "npu-healthwatch"); err != nil {
		return nil, nil, err
	}

	wedge, err := m.wedge(ctx, hw)
	if err != nil {
		return nil, nil, err
	}
	return []report.Agent{rbAgent, hwAgent}, wedge, nil
}

type run struct {
	cfg     Config
	node    string
	sim     *simhost.Host
	markers marker.Dir
	mu      sync.Mutex
	procs   []*proc
}

// proc is one agent process; lines receives its log lines with their
// receive times.
type proc struct {
	cmd   *exec.Cmd
	done  chan struct{}
	lines chan line
}

type line struct {
	at   time.Time
	text string
}

func (r *run) start(ctx context.Context, bin string, args ...string) (*proc, error) {
	logf, err := os.Create(filepath.Join(r.cfg.Dir, fmt.Sprintf("%s-%d.log", bin, len(r.procs))))
	if err != nil {
		return nil, fmt.Errorf("log of %s: %w", bin, err)
	}
	all := append(args, "--kubeconfig="+r.cfg.Env.Kubeconfig, "--log-level=debug")
	cmd := exec.CommandContext(ctx, filepath.Join(r.cfg.Env.ProductBinDir, bin), all...)
	cmd.Env = append(os.Environ(), agenthost.EnvVar+"="+r.sim.Dir)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = logf, pw
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), lines: make(chan line, 1024)}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			now := time.Now()
			_, _ = fmt.Fprintln(logf, sc.Text())
			select {
			case p.lines <- line{at: now, text: sc.Text()}:
			default: // nobody is reading: the file has it
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		_ = logf.Close()
		close(p.done)
	}()
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	return p, nil
}

func (r *run) startWatch(ctx context.Context, interval time.Duration) (*proc, error) {
	return r.start(ctx, "npu-healthwatch", "watch", "--node-name="+r.node, "--marker-dir="+markerDir,
		fmt.Sprintf("--probe-interval=%s", interval), "--probe-timeout=5s", fmt.Sprintf("--failure-threshold=%d", threshold))
}

func (p *proc) stop() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (r *run) stopAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		p.stop()
	}
}

func sample2(a, b *proc) (procstat.Usage, procstat.Usage, error) {
	ua, err := procstat.Read(a.cmd.Process.Pid)
	if err != nil {
		return ua, procstat.Usage{}, err
	}
	ub, err := procstat.Read(b.cmd.Process.Pid)
	return ua, ub, err
}

// driverLoaded does the driver entry's part: load the driver and write
// the marker the health-watch and validator read.
func (r *run) driverLoaded() error {
	st, err := r.sim.State()
	if err != nil {
		return err
	}
	if st.LoadedDriver == "" {
		if err := r.sim.InstallDriver(context.Background(), version, nil); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(r.markers.Path, 0o755); err != nil {
		return fmt.Errorf("marker dir: %w", err)
	}
	if err := r.markers.SetChipsAtLoad(8); err != nil {
		return err
	}
	return r.markers.SetReady(version)
}

// setBootID is the kubelet's report of the host's boot ID.
func (r *run) setBootID(ctx context.Context) error {
	id, err := r.sim.BootID()
	if err != nil {
		return err
	}
	body := fmt.Sprintf(`{"status":{"nodeInfo":{"bootID":%q}}}`, id)
	if _, err := r.cfg.Env.Client.CoreV1().Nodes().Patch(ctx, r.node, types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch the boot ID of node %s: %w", r.node, err)
	}
	return nil
}

// requestReboot is what the rollout does at reboot-required: the label,
// the reason and the RebootRequired event.
func (r *run) requestReboot(ctx context.Context) error {
	n, err := kube.PatchNode(ctx, r.cfg.Env.Client, r.node, kube.NodeChange{
		Labels:      map[string]*string{keys.RebootRequired(): kube.Set(contract.True)},
		Annotations: map[string]*string{keys.RebootReason(): kube.Set(string(contract.ReasonUpgrade))},
	})
	if err != nil {
		return err
	}
	rec := kube.NewRecorder(r.cfg.Env.Client, "npu-hooks-rollout")
	rec.Node(n, false, contract.EventRebootRequired, "reason=%s: benchmark", contract.ReasonUpgrade)
	rec.Shutdown()
	return nil
}

// waitReboot waits for the rebooter to record the reboot and run the
// reboot command on the simulated host.
func (r *run) waitReboot(ctx context.Context) error {
	if err := r.waitNode(ctx, "reboot recorded", func(n *corev1.Node) bool { return n.Annotations[keys.RebootFromBootID()] != "" }); err != nil {
		return err
	}
	// The simulated host is a directory whose state file is replaced
	// atomically: a watch on the directory sees the reboot command land.
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", r.sim.Dir, err)
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(r.sim.Dir); err != nil {
		return fmt.Errorf("watch %s: %w", r.sim.Dir, err)
	}
	for {
		st, err := r.sim.State()
		if err != nil {
			return err
		}
		if st.RebootRequest != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the reboot command on %s: %w", r.sim.Dir, ctx.Err())
		case <-w.Events:
		case err := <-w.Errors:
			return fmt.Errorf("watch %s: %w", r.sim.Dir, err)
		}
	}
}

func (r *run) waitNode(ctx context.Context, what string, cond func(*corev1.Node) bool) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	lw := cache.NewListWatchFromClient(r.cfg.Env.Client.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", r.node))
	err := testbed.WaitFor(ctx, lw, &corev1.Node{}, func(ns []*corev1.Node) (bool, error) {
		return len(ns) == 1 && cond(ns[0]), nil
	})
	if err != nil {
		return fmt.Errorf("node %s: waiting for %s: %w", r.node, what, err)
	}
	return nil
}

// wedge wedges a chip under a health-watch probing every wedgeInterval and
// times the way to reboot-required=true.
func (r *run) wedge(ctx context.Context, old *proc) (*report.Wedge, error) {
	old.stop()
	hw, err := r.startWatch(ctx, wedgeInterval)
	if err != nil {
		return nil, err
	}
	// Wedge right after a probe passed, so the schedule is known: the
	// threshold-th failed probe is the first moment a decision is allowed.
	if _, err := waitLine(ctx, hw, "probe ok"); err != nil {
		return nil, err
	}
	// The node watch runs from before the wedge and stamps the moment it
	// first sees the request.
	var mu sync.Mutex
	var t1 time.Time
	seen := make(chan error, 1)
	go func() {
		seen <- r.waitNode(ctx, "reboot-required=true after the wedge", func(n *corev1.Node) bool {
			ok := n.Labels[keys.RebootRequired()] == contract.True && n.Annotations[keys.RebootReason()] == string(contract.ReasonRecovery)
			mu.Lock()
			defer mu.Unlock()
			if ok && t1.IsZero() {
				t1 = time.Now()
			}
			return ok
		})
	}()
	t0 := time.Now()
	if err := r.sim.Wedge(3); err != nil {
		return nil, err
	}
	var last time.Time
	for i := 0; i < threshold; i++ {
		if last, err = waitLine(ctx, hw, "chip probe failed"); err != nil {
			return nil, err
		}
	}
	if err := <-seen; err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	return &report.Wedge{Interval: report.S(wedgeInterval), Threshold: threshold, Total: report.S(t1.Sub(t0)), Beyond: report.S(t1.Sub(last))}, nil
}

func waitLine(ctx context.Context, p *proc, substr string) (time.Time, error) {
	for {
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for %q in the health-watch log: %w", substr, ctx.Err())
		case <-p.done:
			return time.Time{}, fmt.Errorf("the health-watch exited while waiting for %q", substr)
		case l := <-p.lines:
			if strings.Contains(l.text, substr) {
				return l.at, nil
			}
		}
	}
}

// helpRSS is the peak RSS of `bin --help`: the cost of loading the
// executable and its package initialisers, before any work. It is the
// process's VmHWM at its exit (see procstat.RunToExit), not wait4's
// maxrss, which for a child of this process is this process's own peak.
func helpRSS(ctx context.Context, dir, bin string) (float64, error) {
	u, err := procstat.RunToExit(ctx, exec.Command(filepath.Join(dir, bin), "--help"))
	if err != nil {
		return 0, fmt.Errorf("%s --help: %w", bin, err)
	}
	return procstat.MiB(u.PeakRSS), nil
}
