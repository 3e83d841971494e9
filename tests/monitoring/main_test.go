// Package monitoring_test runs a real Prometheus (built from the Go
// module proxy, ci/engines/prometheus) against the test bed during a
// manual driver upgrade on process nodes: it scrapes the node agents
// and the fleet exporter (file_sd targets written from the pods, as the
// chart's PodMonitors would find them), evaluates the chart's rendered
// alert rules, and answers the dashboard's queries.
package monitoring_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

var env *testbed.Env

func TestMain(m *testing.M) { os.Exit(testbed.Main(m, &env, testbed.BuildEngines)) }

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
