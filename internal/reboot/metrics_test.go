package reboot

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/openfuyao/npu-stack/internal/contract"
)

func TestMetrics(t *testing.T) {
	m := NewMetrics("npu-0")
	m.observe(true, contract.ReasonRecovery, true, 2)
	m.completed(contract.ReasonRecovery)
	want := `# HELP npu_rebooter_reboot_budget_left Reboots this node may still take before the loop guard refuses.
# TYPE npu_rebooter_reboot_budget_left gauge
npu_rebooter_reboot_budget_left{node="npu-0"} 2
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
`
	if got := text(t, m); got != want {
		t.Fatalf("exposition:\n%s\nwant:\n%s", got, want)
	}
	m.observe(false, "", false, 3)
	if got := text(t, m); !strings.Contains(got, `npu_rebooter_reboot_pending{node="npu-0",reason="recovery"} 0`) {
		t.Fatalf("pending after the reboot:\n%s", got)
	}
}

// The hand-written exposition is what a client_golang registry with the
// same metrics serves, escaping included: parsed by Prometheus' own text
// parser and compared series by series.
func TestMetricsMatchClientGolang(t *testing.T) {
	node := `npu-"odd"\node` + "\n"
	m, ref := NewMetrics(node), newReference(node)
	steps := []struct {
		pending, slot bool
		reason        contract.RebootReason
		left          int
		completed     contract.RebootReason
	}{
		{pending: false, left: 3},
		{pending: true, reason: contract.ReasonUpgrade, slot: true, left: 3, completed: contract.ReasonUpgrade},
		{pending: true, reason: "", left: 2},
		{pending: true, reason: `a "new" reason\x`, left: 1, completed: `a "new" reason\x`},
	}
	for i, s := range steps {
		m.observe(s.pending, s.reason, s.slot, s.left)
		ref.observe(s.pending, s.reason, s.slot, s.left)
		if s.completed != "" {
			m.completed(s.completed)
			ref.completed(s.completed)
		}
		if err := testutil.GatherAndCompare(ref.reg, strings.NewReader(text(t, m))); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
}

func TestMetricsHandler(t *testing.T) {
	m := NewMetrics("npu-0")
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("Content-Type %q", ct)
	}
	if rec.Body.String() != text(t, m) {
		t.Fatalf("body %q", rec.Body.String())
	}
}

func text(t *testing.T, m *Metrics) string {
	t.Helper()
	var b strings.Builder
	if _, err := m.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// reference is the client_golang implementation the metrics had.
type reference struct {
	reg                  *prometheus.Registry
	reboots              *prometheus.CounterVec
	pending              *prometheus.GaugeVec
	slotHeld, budgetLeft prometheus.Gauge
}

func newReference(node string) *reference {
	labels := prometheus.Labels{"node": node}
	r := &reference{
		reg: prometheus.NewRegistry(),
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
	}
	r.reg.MustRegister(r.reboots, r.pending, r.slotHeld, r.budgetLeft)
	for _, reason := range []contract.RebootReason{contract.ReasonUpgrade, contract.ReasonRecovery} {
		r.reboots.WithLabelValues(string(reason))
		r.pending.WithLabelValues(string(reason))
	}
	return r
}

func (r *reference) observe(pending bool, reason contract.RebootReason, slotHeld bool, budgetLeft int) {
	r.pending.Reset()
	for _, rr := range []contract.RebootReason{contract.ReasonUpgrade, contract.ReasonRecovery} {
		r.pending.WithLabelValues(string(rr)).Set(0)
	}
	if pending {
		r.pending.WithLabelValues(reasonText(reason)).Set(1)
	}
	r.slotHeld.Set(boolGauge(slotHeld))
	r.budgetLeft.Set(float64(budgetLeft))
}

func (r *reference) completed(reason contract.RebootReason) {
	r.reboots.WithLabelValues(reasonText(reason)).Inc()
}
