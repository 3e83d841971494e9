// Package monitoring_test runs a real Prometheus (built from the Go
// module proxy, ci/engines/prometheus) against the test bed during a
// manual driver upgrade on process nodes: it scrapes the node agents
// and the fleet exporter (file_sd targets written from the pods, as the
// chart's PodMonitors would find them), evaluates the chart's rendered
// alert rules, and answers the dashboard's queries.
package monitoring_test

import (
	"context"
	"net"
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

// freePort is a port nothing listens on now, on any address: the
// agents bind it on their node's pod address.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
