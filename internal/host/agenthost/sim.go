//go:build simhost

package agenthost

import (
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

// WithSimulatedHost: this build can run on the simulated host.
const WithSimulatedHost = true

func simulated(dir string, flags *host.Linux) (host.Host, error) {
	return simhost.OpenAs(dir, flags), nil
}
