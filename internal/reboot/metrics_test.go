package reboot

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/openfuyao/npu-stack/internal/contract"
)

func TestMetrics(t *testing.T) {
	m := NewMetrics("npu-0")
	m.observe(true, contract.ReasonRecovery, true, 2, CauseStorm)
	m.completed(contract.ReasonRecovery)
	m.fleetEvents.Inc()
	want := `
# HELP npu_rebooter_fleet_watch_events_total Watch events about the NPU nodes asking for a reboot that this node's storm protection received (recoveryPolicy.autoRecover); none while the fleet is idle.
# TYPE npu_rebooter_fleet_watch_events_total counter
npu_rebooter_fleet_watch_events_total{node="npu-0"} 1
# HELP npu_rebooter_reboot_pending 1 while a reboot of this node is pending, by reason.
# TYPE npu_rebooter_reboot_pending gauge
npu_rebooter_reboot_pending{node="npu-0",reason="recovery"} 1
npu_rebooter_reboot_pending{node="npu-0",reason="upgrade"} 0
# HELP npu_rebooter_reboots_total Reboots of this node completed under the rebooter, by reason.
# TYPE npu_rebooter_reboots_total counter
npu_rebooter_reboots_total{node="npu-0",reason="recovery"} 1
npu_rebooter_reboots_total{node="npu-0",reason="upgrade"} 0
# HELP npu_rebooter_slot_held 1 while this node holds a cluster-wide reboot slot.
# TYPE npu_rebooter_slot_held gauge
npu_rebooter_slot_held{node="npu-0"} 1
# HELP npu_rebooter_reboot_budget_left Reboots this node may still take before the loop guard refuses.
# TYPE npu_rebooter_reboot_budget_left gauge
npu_rebooter_reboot_budget_left{node="npu-0"} 2
# HELP npu_rebooter_reboot_blocked 1 while a pending reboot of this node waits, by what it waits for (approval, budget = loop guard, bad-history, storm, uptime-guard, backoff, going-down, driver-ready, driver-install, maintenance-window); 0 for the others.
# TYPE npu_rebooter_reboot_blocked gauge
npu_rebooter_reboot_blocked{cause="approval",node="npu-0"} 0
npu_rebooter_reboot_blocked{cause="backoff",node="npu-0"} 0
npu_rebooter_reboot_blocked{cause="bad-history",node="npu-0"} 0
npu_rebooter_reboot_blocked{cause="budget",node="npu-0"} 0
npu_rebooter_reboot_blocked{cause="driver-install",node="npu-0"} 0
npu_rebooter_reboot_blocked{cause="driver-ready",node="npu-0"} 0
npu_rebooter_reboot_blocked{cause="going-down",node="npu-0"} 0
npu_rebooter_reboot_blocked{cause="maintenance-window",node="npu-0"} 0
npu_rebooter_reboot_blocked{cause="storm",node="npu-0"} 1
npu_rebooter_reboot_blocked{cause="uptime-guard",node="npu-0"} 0
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	m.observe(false, "", false, 3, CauseNone)
	if got := testutil.ToFloat64(m.pending.WithLabelValues("recovery")); got != 0 {
		t.Fatalf("pending after the reboot = %v", got)
	}
	if n := testutil.CollectAndCount(m.blocked); n != len(causes()) {
		t.Fatalf("%d npu_rebooter_reboot_blocked series with no reboot pending, want one per cause (%d)", n, len(causes()))
	}
	if got := testutil.ToFloat64(m.blocked.WithLabelValues(string(CauseStorm))); got != 0 {
		t.Fatalf("npu_rebooter_reboot_blocked{cause=storm} = %v with no reboot pending", got)
	}
	if n := testutil.CollectAndCount(NewMetrics("npu-1").blocked); n != len(causes()) {
		t.Fatalf("a new rebooter exposes %d npu_rebooter_reboot_blocked series, want one per cause (%d): an alert's series must exist before it fires", n, len(causes()))
	}
}
