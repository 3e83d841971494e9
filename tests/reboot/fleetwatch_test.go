package reboot_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestStormProtectionWatchesOnlyRebootRequests: with autoRecover, a
// node's rebooter learns of the other NPU nodes only when one asks for a
// reboot. Forty NPU nodes with no rebooter of their own change eighty
// times (labels the storm protection does not read, as kubelet status
// updates change nodes all day); then one of them asks for a reboot, and
// the rebooter's npu_rebooter_fleet_watch_events_total grows by exactly
// that one event. One watch stream delivers in order, so by the time the
// request arrives every earlier change would have. An agent watching
// every NPU node would count the eighty as well: N agents, N² events.
func TestStormProtectionWatchesOnlyRebootRequests(t *testing.T) {
	ctx := ctxTimeout(t, 4*time.Minute)
	port := testbed.FreePort(t)
	f := newFleet(t, 1, func(r, rec, _ map[string]any) {
		r["metricsPort"] = port
		rec["autoRecover"], rec["maxWedgedNodes"] = true, "50%"
	})
	others, err := env.AddNodes(ctx, 40, "rb-idle", map[string]string{fleetLabel: f.ns, contract.LabelNPUPresent: contract.True})
	if err != nil {
		t.Fatal(err)
	}
	before := waitCounter(ctx, t, port, func(float64) bool { return true })

	for round := range 2 {
		for _, n := range others {
			patch(t, n, kube.NodeChange{Labels: map[string]*string{"example.com/heartbeat": kube.Set(strconv.Itoa(round))}})
		}
	}
	requestReboot(t, others[0], contract.ReasonUpgrade)
	got := waitCounter(ctx, t, port, func(v float64) bool { return v > before })
	if got != before+1 {
		t.Fatalf("the rebooter on %s received %v watch events of other NPU nodes for 80 changes that ask for no reboot and 1 reboot request; want 1", f.nodes[0].Name(), got-before)
	}
	// The request withdrawn: the node leaves the selection, one event.
	patch(t, others[0], kube.NodeChange{Labels: map[string]*string{keys.RebootRequired(): nil}})
	if got := waitCounter(ctx, t, port, func(v float64) bool { return v > before+1 }); got != before+2 {
		t.Fatalf("the withdrawn request gave %v events, want 1", got-before-1)
	}
}

// waitCounter polls the rebooter's npu_rebooter_fleet_watch_events_total
// until ok accepts it. Polling: a metric is nothing a client can watch.
func waitCounter(ctx context.Context, t *testing.T, port int, ok func(float64) bool) float64 {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if v, err := fleetEvents(ctx, port); err == nil && ok(v) {
			return v
		}
		select {
		case <-ctx.Done():
			v, err := fleetEvents(context.Background(), port)
			t.Fatalf("npu_rebooter_fleet_watch_events_total on :%d: %v (%v)", port, v, err)
		case <-tick.C:
		}
	}
}

func fleetEvents(ctx context.Context, port int) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "npu_rebooter_fleet_watch_events_total{") {
			f := strings.Fields(l)
			return strconv.ParseFloat(f[len(f)-1], 64)
		}
	}
	return 0, fmt.Errorf("no npu_rebooter_fleet_watch_events_total")
}
