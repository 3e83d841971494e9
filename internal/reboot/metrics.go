package reboot

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// Metrics are the rebooter's per-node Prometheus metrics, in a registry
// of their own (no global state: tests run many agents in one process).
//
// They are written in the Prometheus text exposition format by hand: four
// metrics do not need github.com/prometheus/client_golang, whose package
// initialisation (default registry, Go and process collectors, protobuf
// descriptors) costs the node agent 1.5 MiB of resident memory.
type Metrics struct {
	node string

	mu         sync.Mutex
	reboots    map[string]float64 // by reason
	pending    map[string]float64 // by reason
	slotHeld   float64
	budgetLeft float64
}

const (
	metricReboots    = "npu_rebooter_reboots_total"
	metricPending    = "npu_rebooter_reboot_pending"
	metricSlotHeld   = "npu_rebooter_slot_held"
	metricBudgetLeft = "npu_rebooter_reboot_budget_left"
)

// NewMetrics creates the metrics of node.
func NewMetrics(node string) *Metrics {
	m := &Metrics{node: node, reboots: map[string]float64{}, pending: map[string]float64{}}
	// Both reasons exist from the start, so rate() sees the first reboot.
	for _, r := range []contract.RebootReason{contract.ReasonUpgrade, contract.ReasonRecovery} {
		m.reboots[string(r)] = 0
		m.pending[string(r)] = 0
	}
	return m
}

func (m *Metrics) observe(pending bool, reason contract.RebootReason, slotHeld bool, budgetLeft int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.pending)
	for _, r := range []contract.RebootReason{contract.ReasonUpgrade, contract.ReasonRecovery} {
		m.pending[string(r)] = 0
	}
	if pending {
		m.pending[reasonText(reason)] = 1
	}
	m.slotHeld = boolGauge(slotHeld)
	m.budgetLeft = float64(budgetLeft)
}

func (m *Metrics) completed(reason contract.RebootReason) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reboots[reasonText(reason)]++
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// WriteTo writes the metrics in the Prometheus text format (version
// 0.0.4), families sorted by name and series by label value, as a
// client_golang registry gathers them.
func (m *Metrics) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	m.mu.Lock()
	writeFamily(&b, metricBudgetLeft, "Reboots this node may still take before the loop guard refuses.", "gauge", m.node, "", map[string]float64{"": m.budgetLeft})
	writeFamily(&b, metricPending, "1 while a reboot of this node is pending, by reason.", "gauge", m.node, "reason", m.pending)
	writeFamily(&b, metricReboots, "Reboots of this node completed under the rebooter, by reason.", "counter", m.node, "reason", m.reboots)
	writeFamily(&b, metricSlotHeld, "1 while this node holds a cluster-wide reboot slot.", "gauge", m.node, "", map[string]float64{"": m.slotHeld})
	m.mu.Unlock()
	n, err := b.WriteTo(w)
	if err != nil {
		return n, fmt.Errorf("write metrics: %w", err)
	}
	return n, nil
}

// ServeHTTP serves the metrics, as a /metrics endpoint.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = m.WriteTo(w)
}

// writeFamily writes one metric family. Each key of values is the value
// of the label named label, besides node; with label "", values holds the
// one series under "".
func writeFamily(b *bytes.Buffer, name, help, typ, node, label string, values map[string]float64) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typ)
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(b, `%s{node="%s"`, name, escapeLabel(node))
		if label != "" {
			fmt.Fprintf(b, `,%s="%s"`, label, escapeLabel(k))
		}
		fmt.Fprintf(b, "} %s\n", strconv.FormatFloat(values[k], 'g', -1, 64))
	}
}

// escapeHelp escapes a help text as the text format wants: backslash and
// newline.
func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

// escapeLabel escapes a label value: backslash, newline and double quote.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`).Replace(s)
}
