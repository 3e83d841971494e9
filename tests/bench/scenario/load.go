package scenario

import (
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

// processes are the control plane's components and this process.
func (b *Bed) processes() map[string]int {
	procs := b.cfg.Env.Components()
	procs[benchProcess] = os.Getpid()
	return procs
}

// markLoad reads the counters loadSince measures from.
func (b *Bed) markLoad(ctx context.Context) (loadMark, error) {
	m := loadMark{cpu: map[string]time.Duration{}}
	var err error
	if m.api, err = apiload.Take(ctx, b.cfg.Env.Client.CoreV1().RESTClient(), time.Now); err != nil {
		return m, err
	}
	for name, pid := range b.processes() {
		u, err := procstat.Read(pid)
		if err != nil {
			return m, fmt.Errorf("CPU of %s: %w", name, err)
		}
		m.cpu[name] = u.CPU
	}
	return m, nil
}

// loadSince is the cluster's load from m until now: the API server's
// writes, and the cores each process used, the rollout's (rolloutCPU,
// read at its exit) among them, busiest first.
func (b *Bed) loadSince(ctx context.Context, m loadMark, rolloutCPU time.Duration) (*report.APILoad, []report.ProcessCPU, error) {
	now, err := apiload.Take(ctx, b.cfg.Env.Client.CoreV1().RESTClient(), time.Now)
	if err != nil {
		return nil, nil, err
	}
	api := apiload.Between(m.api, now)
	secs := now.At.Sub(m.api.At).Seconds()
	cpu := []report.ProcessCPU{{Name: "npu-hooks rollout", Cores: rolloutCPU.Seconds() / secs}}
	for name, pid := range b.processes() {
		u, err := procstat.Read(pid)
		if err != nil {
			return nil, nil, fmt.Errorf("CPU of %s: %w", name, err)
		}
		cpu = append(cpu, report.ProcessCPU{Name: name, Cores: (u.CPU - m.cpu[name]).Seconds() / secs})
	}
	slices.SortFunc(cpu, func(x, y report.ProcessCPU) int {
		switch {
		case x.Cores > y.Cores:
			return -1
		case x.Cores < y.Cores:
			return 1
		}
		return 0
	})
	return &api, cpu, nil
}
