// Package demo is the local cluster a newcomer sees: process-backed NPU
// nodes of two driver profiles (hook Jobs, rebooters, driver gates and
// health-watches really run), a CPU node for the hook Jobs, and one real
// 910B and one real 310P node (kubelet, containerd and runc running the
// chart's pods with the stand-in Ascend driver and images), and the
// `make demo` story driven on it.
package demo

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/openfuyao/npu-stack/tests/testbed"
	"github.com/openfuyao/npu-stack/tests/testbed/procnode"
)

// Profiles of the demo fleet: two chips on one kernel and OS.
var Profiles = []string{"910b", "310p"}

const (
	Kernel = "5.15.0-105-generic"
	OS     = "ubuntu22.04"
)

// Fleet are the nodes of the demo cluster.
type Fleet struct {
	NPU  []*procnode.Node
	Real []*RealNode
	CPU  *procnode.Node

	standins *standins // of the real nodes
}

// Size is the number of NPU nodes, process-backed and real.
func (f *Fleet) Size() int { return len(f.NPU) + len(f.Real) }

// AddFleet registers n process-backed NPU nodes split across the profiles
// (fresh machines: the driver pod installs the driver on first boot), one
// CPU node, which the chart's hook Jobs prefer, and, when real is set,
// one real node per chip model, as fresh as the others.
func AddFleet(ctx context.Context, env *testbed.Env, n int, real bool) (*Fleet, error) {
	if n < 1 {
		return nil, fmt.Errorf("need at least one NPU node, got %d", n)
	}
	f := &Fleet{}
	type built struct {
		b   *standins
		err error
	}
	var standinsDone chan built
	if real {
		// Built while the nodes start; waited for before AddFleet
		// returns, also on failure, so nothing writes into env.Dir after.
		standinsDone = make(chan built, 1)
		go func() {
			var b *standins
			err := env.Progress.Step(fmt.Sprintf("building the real nodes' stand-in Ascend driver (%s, %s), device plugin and exporter (gcc, go build)", v1, v2), func() (err error) {
				b, err = buildStandins(ctx, filepath.Join(env.Dir, "standin"))
				return err
			})
			standinsDone <- built{b, err}
		}()
	}
	err := f.addNodes(ctx, env, n, real)
	if real {
		r := <-standinsDone
		f.standins = r.b
		err = errors.Join(err, r.err)
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// FleetSteps is the number of Progress steps AddFleet reports.
func FleetSteps(real bool) int {
	if real {
		return 3
	}
	return 1
}

// addNodes starts the nodes of AddFleet.
func (f *Fleet) addNodes(ctx context.Context, env *testbed.Env, n int, real bool) error {
	err := env.Progress.Step(fmt.Sprintf("starting %d process-backed NPU nodes (%s) and a CPU node", n, strings.Join(Profiles, ", ")), func() error {
		return f.addProcessNodes(ctx, env, n)
	})
	if err != nil || !real {
		return err
	}
	return env.Progress.Step("starting the real 910B and 310P nodes (kubelet, containerd, runc; their init and runc wrapper built once)", func() (err error) {
		f.Real, err = addRealNodes(ctx, env)
		return err
	})
}

// addProcessNodes starts n process-backed NPU nodes across the profiles
// and the CPU node.
func (f *Fleet) addProcessNodes(ctx context.Context, env *testbed.Env, n int) error {
	for i, chip := range Profiles {
		count := n / len(Profiles)
		if i < n%len(Profiles) {
			count++
		}
		if count == 0 {
			continue
		}
		nodes, err := env.AddProcessNodes(ctx, count, testbed.NodeSpec{Prefix: "npu-" + chip, Chip: chip, Kernel: Kernel, OS: OS})
		if err != nil {
			return err
		}
		f.NPU = append(f.NPU, nodes...)
	}
	cpu, err := env.AddProcessNodes(ctx, 1, testbed.NodeSpec{Prefix: "cpu", CPU: true})
	if err != nil {
		return err
	}
	f.CPU = cpu[0]
	return nil
}

// Values are chart values for the demo cluster at driver version: manual
// upgrades (the chart's default), automatic chip recovery, timings scaled
// to seconds, and a profile for each real node's kernel.
func (f *Fleet) Values(version string) map[string]any {
	profiles := []any{}
	for _, chip := range Profiles {
		profiles = append(profiles, map[string]any{"name": chip, "chip": chip, "kernel": Kernel, "os": OS, "nodeSelector": map[string]any{}})
	}
	profiles = append(profiles, f.realProfiles()...)
	return map[string]any{
		"driver": map[string]any{
			"version":  version,
			"profiles": profiles,
			"upgradePolicy": map[string]any{"autoUpgrade": false, "maxParallelUpgrades": 2, "maxUnavailable": "50%",
				"rebootTimeoutSeconds": 300},
		},
		"recoveryPolicy": map[string]any{"autoRecover": true, "maxWedgedNodes": "50%"},
		// Test-bed machines boot in seconds: no uptime guard; metrics
		// off because every process node shares one loopback.
		"rebooter":    map[string]any{"uptimeGuardMinutes": 0, "metricsPort": 0, "slots": 2},
		"healthWatch": map[string]any{"probeIntervalSeconds": 2, "probeTimeoutSeconds": 2, "failureThreshold": 3, "metricsPort": 0},
		"hooks": map[string]any{"resume": map[string]any{"enabled": false},
			"activeDeadlineSeconds": 900},
	}
}
