package reboot

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// Metrics are the rebooter's per-node Prometheus metrics, in a registry
// of their own (no global state: tests run many agents in one process).
type Metrics struct {
	Registry   *prometheus.Registry
	reboots    *prometheus.CounterVec
	pending    *prometheus.GaugeVec
	slotHeld   prometheus.Gauge
	budgetLeft prometheus.Gauge
	// fleetEvents counts what the storm protection's watch delivers: the
	// cost each agent puts on the API server per change in the fleet.
	fleetEvents prometheus.Counter
	// blocked is 1 for what a pending reboot waits for (Cause): the
	// alerts' view of a refusal (loop guard, storm protection).
	blocked *prometheus.GaugeVec
}

// NewMetrics creates the metrics of node.
func NewMetrics(node string) *Metrics {
	labels := prometheus.Labels{"node": node}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		reboots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "npu_rebooter_reboots_total", Help: "Reboots of this node completed under the rebooter, by reason.", ConstLabels: labels,
		}, []string{"reason"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "npu_rebooter_reboot_pending", Help: "1 while a reboot of this node is pending, by reason.", ConstLabels: labels,
		}, []string{"reason"}),
		slotHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "npu_rebooter_slot_held", Help: "1 while this node holds a cluster-wide reboot slot.", ConstLabels: labels,
		}),
		budgetLeft: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "npu_rebooter_reboot_budget_left", Help: "Reboots this node may still take before the loop guard refuses.", ConstLabels: labels,
		}),
		fleetEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "npu_rebooter_fleet_watch_events_total", ConstLabels: labels,
			Help: "Watch events about the NPU nodes asking for a reboot that this node's storm protection received (recoveryPolicy.autoRecover); none while the fleet is idle.",
		}),
		blocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "npu_rebooter_reboot_blocked", Help: "1 while a pending reboot of this node waits, by what it waits for (approval, budget = loop guard, bad-history, storm, uptime-guard, backoff, going-down, driver-ready, driver-install, maintenance-window); 0 for the others.", ConstLabels: labels,
		}, []string{"cause"}),
	}
	m.Registry.MustRegister(m.reboots, m.pending, m.slotHeld, m.budgetLeft, m.fleetEvents, m.blocked)
	// Both reasons and every cause exist from the start, so rate() sees
	// the first reboot and an alert's series is there before it fires.
	for _, r := range []contract.RebootReason{contract.ReasonUpgrade, contract.ReasonRecovery} {
		m.reboots.WithLabelValues(string(r))
		m.pending.WithLabelValues(string(r))
	}
	for _, c := range causes() {
		m.blocked.WithLabelValues(string(c))
	}
	return m
}

func (m *Metrics) observe(pending bool, reason contract.RebootReason, slotHeld bool, budgetLeft int, blocked Cause) {
	for _, c := range causes() {
		m.blocked.WithLabelValues(string(c)).Set(0)
	}
	if pending && blocked != CauseNone {
		m.blocked.WithLabelValues(string(blocked)).Set(1)
	}
	m.pending.Reset()
	for _, r := range []contract.RebootReason{contract.ReasonUpgrade, contract.ReasonRecovery} {
		m.pending.WithLabelValues(string(r)).Set(0)
	}
	if pending {
		m.pending.WithLabelValues(reasonText(reason)).Set(1)
	}
	m.slotHeld.Set(boolGauge(slotHeld))
	m.budgetLeft.Set(float64(budgetLeft))
}

func (m *Metrics) completed(reason contract.RebootReason) {
	m.reboots.WithLabelValues(reasonText(reason)).Inc()
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
