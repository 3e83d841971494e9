//go:build !simhost

package agenthost

import (
	"errors"

	"github.com/openfuyao/npu-stack/internal/host"
)

// WithSimulatedHost: this build runs on the real host only.
const WithSimulatedHost = false

func simulated(string, *host.Linux) (host.Host, error) {
	return nil, errors.New("the simulated host is for tests and is not in this build (only a build with the tag simhost has it); unset the variable")
}
