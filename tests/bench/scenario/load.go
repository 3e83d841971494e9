package scenario

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/openfuyao/npu-stack/tests/bench/apiload"
	"github.com/openfuyao/npu-stack/tests/bench/procstat"
	"github.com/openfuyao/npu-stack/tests/bench/report"
)

// benchProcess names this process in the CPU table: it plays every
// simulated node; the counting proxies are processes of their own.
const (
	benchProcess     = "npu-bench (simulated nodes)"
	proxyProcess     = "counting proxy of npu-stack"
	peerProxyProcess = "counting proxy of the peer"
	apiServerProcess = "kube-apiserver"
)

// loadMark is the cluster's counters when a rollout starts.
type loadMark struct {
	api apiload.Snapshot
	cpu map[string]time.Duration
}

// markLoad reads the counters loadSince measures from.
func (b *Bed) markLoad(ctx context.Context) (loadMark, error) {
	api, err := apiload.Take(ctx, b.cfg.Env.Client.CoreV1().RESTClient(), time.Now)
	if err != nil {
		return loadMark{}, err
	}
	cpu, err := b.cpuTimes()
	return loadMark{api: api, cpu: cpu}, err
}

// sideLoad is the cluster's load over a side's window.
type sideLoad struct {
	api *report.APILoad
	cpu []report.ProcessCPU
	// ownAPIServerCPU is the API server's CPU over the window in the
	// share of its request execution time that went to the side's own
	// requests (ownShare): the part of its CPU the side's requests
	// themselves cost, apart from what they set off in other clients.
	ownAPIServerCPU report.Seconds
	ownShare        float64
}

// loadSince is the cluster's load from m until now: the API server's
// writes, the cores each process used, the measured process's (name, its
// CPU time over the window) among them, busiest first, and the API
// server's CPU spent on the requests the FlowSchema flow classified.
func (b *Bed) loadSince(ctx context.Context, m loadMark, name string, measuredCPU time.Duration, flow string) (sideLoad, error) {
	now, err := apiload.Take(ctx, b.cfg.Env.Client.CoreV1().RESTClient(), time.Now)
	if err != nil {
		return sideLoad{}, err
	}
	cpuNow, err := b.cpuTimes()
	if err != nil {
		return sideLoad{}, err
	}
	share, ok := apiload.ExecShare(m.api, now, flow)
	if !ok {
		return sideLoad{}, fmt.Errorf("the API server's metrics show no request execution time (API Priority and Fairness off?): "+
			"the CPU of %s's requests cannot be told apart", name)
	}
	api := apiload.Between(m.api, now)
	secs := now.At.Sub(m.api.At).Seconds()
	out := sideLoad{api: &api, cpu: []report.ProcessCPU{{Name: name, Cores: measuredCPU.Seconds() / secs}}, ownShare: share,
		ownAPIServerCPU: report.S(time.Duration(share * float64(cpuNow[apiServerProcess]-m.cpu[apiServerProcess])))}
	ours := measuredCPU
	for name, t := range cpuNow {
		if name == machineBusy {
			continue
		}
		ours += t - m.cpu[name]
		out.cpu = append(out.cpu, report.ProcessCPU{Name: name, Cores: (t - m.cpu[name]).Seconds() / secs})
	}
	// What the machine's other processes took: a benchmark sharing its
	// cores with other work runs slower than the cores it shows for itself.
	others := max(cpuNow[machineBusy]-m.cpu[machineBusy]-ours, 0)
	out.cpu = append(out.cpu, report.ProcessCPU{Name: otherProcesses, Cores: others.Seconds() / secs})
	slices.SortFunc(out.cpu, func(x, y report.ProcessCPU) int { return cmp.Compare(y.Cores, x.Cores) })
	return out, nil
}

// Names in the CPU table: the whole machine's busy time (read, not
// shown) and what other processes than the cluster's and the measured
// one used of it.
const (
	machineBusy    = "machine"
	otherProcesses = "other processes on the machine"
)

// cpuTimes is the CPU time so far of the control plane's components, this
// process and the whole machine.
func (b *Bed) cpuTimes() (map[string]time.Duration, error) {
	busy, err := procstat.MachineBusy()
	if err != nil {
		return nil, err
	}
	procs := b.cfg.Env.Components()
	procs[benchProcess] = os.Getpid()
	procs[proxyProcess] = b.proxy.Pid()
	if b.peerProxy != nil {
		procs[peerProxyProcess] = b.peerProxy.Pid()
	}
	out := map[string]time.Duration{machineBusy: busy}
	for name, pid := range procs {
		u, err := procstat.Read(pid)
		if err != nil {
			return nil, fmt.Errorf("CPU of %s: %w", name, err)
		}
		out[name] = u.CPU
	}
	return out, nil
}

// apiServerCPU is the API server's CPU time so far.
func (b *Bed) apiServerCPU() (time.Duration, error) {
	pid, ok := b.cfg.Env.Components()[apiServerProcess]
	if !ok {
		return 0, fmt.Errorf("the control plane has no %s process", apiServerProcess)
	}
	u, err := procstat.Read(pid)
	if err != nil {
		return 0, fmt.Errorf("CPU of %s: %w", apiServerProcess, err)
	}
	return u.CPU, nil
}

// apiServerCPUSince is what the API server spent over a window of length
// window that began with the reading from, above its idle rate (the
// fleet's node Lease renewals and the controllers' resyncs go on however
// long a side takes): the side's requests and what they set off (the
// simulated kubelets, the DaemonSet controller, KWOK). Never negative.
func (b *Bed) apiServerCPUSince(from, window time.Duration) (*report.Seconds, error) {
	now, err := b.apiServerCPU()
	if err != nil {
		return nil, err
	}
	above := report.Seconds(max((now-from).Seconds()-b.idleAPIServer*window.Seconds(), 0))
	return &above, nil
}

// idleWindow is how long the API server's idle rate is measured.
const idleWindow = 30 * time.Second

// measureIdle reads the API server's CPU over idleWindow with the fleet
// set up and nothing upgrading: the rate its per-side figures discount.
func (b *Bed) measureIdle(ctx context.Context) error {
	c0, err := b.apiServerCPU()
	if err != nil {
		return err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(idleWindow):
	}
	c1, err := b.apiServerCPU()
	if err != nil {
		return err
	}
	b.idleAPIServer = (c1 - c0).Seconds() / time.Since(t0).Seconds()
	return nil
}
