package peerrun

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/tests/bench/inflight"
	"github.com/openfuyao/npu-stack/tests/bench/procstat"
)

// readyTimeout bounds the peer's start on n nodes: its caches, and its
// first reconcile, which labels a fresh fleet's every node upgrade-done
// one node at a time.
func readyTimeout(n int) time.Duration { return 3*time.Minute + time.Duration(n)*200*time.Millisecond }

// ProcessConfig starts npu-peer.
type ProcessConfig struct {
	Binary string
	// Kubeconfig points at the counting proxy.
	Kubeconfig          string
	MaxParallelUpgrades int
	MaxUnavailable      string
	// TimeScale is the fleet's (npu-peer --time-scale): the peer's timers
	// are multiplied by it.
	TimeScale float64
	// LogPath receives the peer's log (the library's and
	// controller-runtime's); TracePath, if set, its reconciles (JSON
	// lines).
	LogPath, TracePath string
}

// Process is a running npu-peer.
type Process struct {
	cfg    ProcessConfig
	nodes  int
	cmd    *exec.Cmd
	logf   *os.File
	ready  chan struct{}
	exited chan struct{}
	err    error // set before exited is closed

	mu      sync.Mutex
	records []Record
	// inProgress are the nodes' times in progress during a Race.
	inProgress []inflight.Interval
}

// leaseName is GPU Operator's leader election ID, the runner's Lease.
const leaseName = "53822513.nvidia.com"

// Start runs npu-peer and waits until it is ready: leader, and a
// reconcile that found every node upgrade-done (the steady state of a
// fleet GPU Operator manages; on a fresh fleet its first reconcile puts
// them there).
func (f *Fleet) Start(ctx context.Context, cfg ProcessConfig) (*Process, error) {
	if err := f.deleteLease(ctx); err != nil {
		return nil, err
	}
	p, err := f.launch(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-p.ready:
		return p, nil
	case <-p.exited:
		err = fmt.Errorf("npu-peer exited before it was ready: %w; log: %s\n%s", p.err, cfg.LogPath, tail(cfg.LogPath, 15))
	case <-time.After(readyTimeout(p.nodes)):
		err = fmt.Errorf("npu-peer not ready after %s (no reconcile found all %d nodes %s); log: %s\n%s", readyTimeout(p.nodes), p.nodes, StateDone, cfg.LogPath, tail(cfg.LogPath, 15))
	case <-ctx.Done():
		err = ctx.Err()
	}
	_, _ = p.Stop()
	return nil, err
}

// deleteLease deletes the Lease a previous peer held: GPU Operator does
// not release it when it stops, and a successor would wait for it to
// expire.
func (f *Fleet) deleteLease(ctx context.Context) error {
	err := f.cfg.Client.CoordinationV1().Leases(f.cfg.Namespace).Delete(ctx, leaseName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the previous peer's Lease: %w", err)
	}
	return nil
}

// launch starts npu-peer without waiting for it.
func (f *Fleet) launch(cfg ProcessConfig) (*Process, error) {
	logf, err := os.Create(cfg.LogPath)
	if err != nil {
		return nil, fmt.Errorf("peer log: %w", err)
	}
	cmd := exec.Command(cfg.Binary, "--kubeconfig="+cfg.Kubeconfig, "--namespace="+f.cfg.Namespace,
		fmt.Sprintf("--max-parallel-upgrades=%d", cfg.MaxParallelUpgrades), "--max-unavailable="+cfg.MaxUnavailable,
		fmt.Sprintf("--time-scale=%g", cfg.TimeScale))
	cmd.Env = withoutKubeconfig(os.Environ())
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("peer stdout: %w", err)
	}
	var trace *os.File
	if cfg.TracePath != "" {
		if trace, err = os.Create(cfg.TracePath); err != nil {
			_ = logf.Close()
			return nil, fmt.Errorf("peer trace: %w", err)
		}
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		if trace != nil {
			_ = trace.Close()
		}
		return nil, fmt.Errorf("start %s: %w", cfg.Binary, err)
	}
	p := &Process{cfg: cfg, nodes: f.cfg.Nodes, cmd: cmd, logf: logf, ready: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if trace != nil {
				_, _ = trace.Write(append(sc.Bytes(), '\n'))
			}
			var r Record
			if json.Unmarshal(sc.Bytes(), &r) != nil {
				continue
			}
			p.mu.Lock()
			p.records = append(p.records, r)
			p.mu.Unlock()
			if r.Error == "" && r.States[StateDone] == p.nodes && len(r.States) == 1 {
				once.Do(func() { close(p.ready) })
			}
		}
		if trace != nil {
			_ = trace.Close()
		}
		// Wait only after the last read: it closes the pipe.
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Usage is the process's CPU time and peak RSS so far.
func (p *Process) Usage() (procstat.Usage, error) { return procstat.Read(p.cmd.Process.Pid) }

// Records are the reconciles so far.
func (p *Process) Records() []Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Record(nil), p.records...)
}

// Stop ends the process (SIGTERM, as the kubelet stops the operator; then
// SIGKILL) and returns its reconciles.
func (p *Process) Stop() ([]Record, error) {
	defer func() { _ = p.logf.Close() }()
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	if p.err != nil && !signalled(p.err) {
		return p.Records(), fmt.Errorf("npu-peer: %w", p.err)
	}
	return p.Records(), nil
}

func signalled(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// PlannedRequeue is GPU Operator's requeue after every reconcile, in real
// time (the peer multiplies it by the fleet's time scale).
const PlannedRequeue = 2 * time.Minute

// Gate is called by a side once it is ready to start its clock, and
// returns the instant the clock starts (the same for both sides of a
// race run at once).
type Gate func() time.Time

// Now is the Gate of a side that runs alone.
func Now() time.Time { return time.Now() }

// Race is one upgrade of the peer with its start-up inside its clock, as
// npu-stack's rollout process starts inside its own: the previous peer's
// Lease deleted and the completion watch synced beforehand, then, from
// the instant gate returns, npu-peer is started and the driver
// DaemonSet bumped to version at once, as GPU Operator's ClusterPolicy
// controller would bump it; the clock stops when want nodes (the fleet's
// size for the whole upgrade) are seen upgrade-done, schedulable, and
// running a Ready driver pod of version. It returns the running process
// (to read its usage, records and nodes in progress, then stop it), the
// clock's start and the wall. A peer that exits, or whose nodes' states stop changing for
// stall, is broken.
func (f *Fleet) Race(ctx context.Context, cfg ProcessConfig, version string, stall time.Duration, want int, gate Gate) (*Process, time.Time, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := f.deleteLease(ctx); err != nil {
		return nil, time.Time{}, 0, err
	}
	w := newDoneWatch(f, version, want)
	if err := w.start(ctx); err != nil {
		return nil, time.Time{}, 0, err
	}
	start := gate()
	w.restart(start)
	p, err := f.launch(cfg)
	if err != nil {
		return nil, start, 0, err
	}
	if err := f.Bump(ctx, version); err != nil {
		return p, start, 0, err
	}
	wall, err := p.wait(ctx, w, version, stall, start)
	p.mu.Lock()
	p.inProgress = w.inProgress(start.Add(wall))
	p.mu.Unlock()
	return p, start, wall, err
}

// InProgress are each node's times in progress during the Race, as the
// library's maxParallelUpgrades counts them (inflight.PeerInProgress) and
// the Race's node watch saw them, a node still in progress at the wall's
// end closed there: how many nodes the peer really upgraded at once.
func (p *Process) InProgress() []inflight.Interval {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]inflight.Interval(nil), p.inProgress...)
}

// wait waits for w to see the upgrade done.
func (p *Process) wait(ctx context.Context, w *doneWatch, version string, stall time.Duration, start time.Time) (time.Duration, error) {
	tick := time.NewTicker(stall / 4)
	defer tick.Stop()
	for {
		select {
		case at := <-w.done:
			return at.Sub(start), nil
		case <-p.exited:
			return time.Since(start), fmt.Errorf("npu-peer exited during the upgrade (%s): %w; log: %s\n%s", w.status(), p.err, p.cfg.LogPath, tail(p.cfg.LogPath, 15))
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("peer upgrade to %s (%s): %w", version, w.status(), ctx.Err())
		case <-tick.C:
			if idle := w.idle(); idle > stall {
				return time.Since(start), fmt.Errorf("the peer's upgrade to %s stalled: no node changed state for %s (%s); log: %s", version, idle.Round(time.Second), w.status(), p.cfg.LogPath)
			}
		}
	}
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

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
