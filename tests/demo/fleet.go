// Package demo is the local cluster a newcomer sees: NPU nodes of two
// driver profiles plus a CPU node for the hook Jobs, all process-backed
// (hook Jobs, rebooters, driver gates and health-watches really run), and
// the `make demo` story driven on it.
package demo

import (
	"context"
	"fmt"

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
	NPU []*procnode.Node
	CPU *procnode.Node
}

// AddFleet registers n NPU nodes split across the profiles (fresh
// machines: the driver pod installs the driver on first boot) and one
// CPU node, which the chart's hook Jobs prefer.
func AddFleet(ctx context.Context, env *testbed.Env, n int) (*Fleet, error) {
	if n < 1 {
		return nil, fmt.Errorf("need at least one NPU node, got %d", n)
	}
	f := &Fleet{}
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
			return nil, err
		}
		f.NPU = append(f.NPU, nodes...)
	}
	cpu, err := env.AddProcessNodes(ctx, 1, testbed.NodeSpec{Prefix: "cpu", CPU: true})
	if err != nil {
		return nil, err
	}
	f.CPU = cpu[0]
	return f, nil
}

// Values are chart values for the demo cluster at driver version: manual
// upgrades (the chart's default), automatic chip recovery, timings scaled
// to seconds.
func Values(version string) map[string]any {
	profiles := []any{}
	for _, chip := range Profiles {
		profiles = append(profiles, map[string]any{"name": chip, "chip": chip, "kernel": Kernel, "os": OS, "nodeSelector": map[string]any{}})
	}
	return map[string]any{
		"driver": map[string]any{
			"version":  version,
			"profiles": profiles,
			"upgradePolicy": map[string]any{"autoUpgrade": false, "maxParallelUpgrades": 2, "maxUnavailable": "50%",
				"rebootTimeoutSeconds": 300},
		},
		"recoveryPolicy": map[string]any{"autoRecover": true, "maxWedgedNodes": "50%"},
		// Simulated machines boot in a second: no uptime guard; metrics
		// off because every node shares one loopback.
		"rebooter":    map[string]any{"uptimeGuardMinutes": 0, "metricsPort": 0, "slots": 2},
		"healthWatch": map[string]any{"probeIntervalSeconds": 2, "probeTimeoutSeconds": 2, "failureThreshold": 3, "metricsPort": 0},
		"hooks": map[string]any{"resume": map[string]any{"enabled": false},
			"activeDeadlineSeconds": 900},
	}
}
