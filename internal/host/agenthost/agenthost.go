// Package agenthost picks the machine a node agent acts on: the real one,
// or, in a test build, the simulated one the test bed names.
//
// The simulated host (internal/host/simhost) is linked in only with the
// build tag simhost, which the test bed sets when it builds the agents
// for its process nodes; the release build (make build, make images)
// never sets it. A release agent that finds the test bed's environment
// variable refuses to start rather than ignore it: an agent meant for a
// simulated machine would otherwise reboot the real one it runs on.
package agenthost

import (
	"fmt"
	"os"

	"github.com/openfuyao/npu-stack/internal/host"
)

// EnvVar names the simulated host's directory for an agent process (the
// test bed sets it for the agents of its process nodes).
const EnvVar = "NPU_STACK_SIM_HOST"

// Select returns the simulated host named by $NPU_STACK_SIM_HOST, else
// real. The simulated host answers through real's settings (driver root,
// npu-smi path) over its own root, so the agent's flags are tested as on a
// node. In a build without the simulated host a set variable is an error.
func Select(real *host.Linux) (host.Host, error) {
	h, err := simulatedAs(real)
	if err != nil || h != nil {
		return h, err
	}
	return real, nil
}

// Simulated returns the simulated host named by $NPU_STACK_SIM_HOST (seen
// by an agent with default settings), nil if the variable is unset. In a
// build without the simulated host a set variable is an error.
func Simulated() (host.Host, error) { return simulatedAs(host.NewLinux("/")) }

func simulatedAs(flags *host.Linux) (host.Host, error) {
	dir := os.Getenv(EnvVar)
	if dir == "" {
		return nil, nil
	}
	h, err := simulated(dir, flags)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", EnvVar, dir, err)
	}
	return h, nil
}
