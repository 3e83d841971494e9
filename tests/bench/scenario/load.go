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
// simulated node and runs the proxy the rollout talks through.
const benchProcess = "npu-bench (simulated nodes, counting proxy)"

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

// loadSince is the cluster's load from m until now: the API server's
// writes, and the cores each process used, the measured process's
// (name, its CPU time over the window) among them, busiest first.
func (b *Bed) loadSince(ctx context.Context, m loadMark, name string, measuredCPU time.Duration) (*report.APILoad, []report.ProcessCPU, error) {
	now, err := apiload.Take(ctx, b.cfg.Env.Client.CoreV1().RESTClient(), time.Now)
	if err != nil {
		return nil, nil, err
	}
	cpuNow, err := b.cpuTimes()
	if err != nil {
		return nil, nil, err
	}
	api := apiload.Between(m.api, now)
	secs := now.At.Sub(m.api.At).Seconds()
	cpu := []report.ProcessCPU{{Name: name, Cores: measuredCPU.Seconds() / secs}}
	ours := measuredCPU
	for name, t := range cpuNow {
		if name == machineBusy {
			continue
		}
		ours += t - m.cpu[name]
		cpu = append(cpu, report.ProcessCPU{Name: name, Cores: (t - m.cpu[name]).Seconds() / secs})
	}
	// What the machine's other processes took: a benchmark sharing its
	// cores with other work runs slower than the cores it shows for itself.
	others := max(cpuNow[machineBusy]-m.cpu[machineBusy]-ours, 0)
	cpu = append(cpu, report.ProcessCPU{Name: otherProcesses, Cores: others.Seconds() / secs})
	slices.SortFunc(cpu, func(x, y report.ProcessCPU) int { return cmp.Compare(y.Cores, x.Cores) })
	return &api, cpu, nil
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
