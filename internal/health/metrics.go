package health

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the health-watch's Prometheus series. They go to a registry
// the caller owns, so tests and several watchers in one process never
// share global state.
type Metrics struct {
	chipHealthy *prometheus.GaugeVec
	chips       prometheus.Gauge
	failures    prometheus.Gauge
	probes      *prometheus.CounterVec
	duration    prometheus.Histogram
	wedged      prometheus.Gauge
	hostProblem prometheus.Gauge
}

// NewMetrics registers the series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		chipHealthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "npu_healthwatch_chip_healthy",
			Help: "1 if the chip's health (npu-smi info) is OK or Warning, 0 if Alarm, Critical or unknown; by NPU (card) and chip index.",
		}, []string{"npu", "chip", "name", "health"}),
		chips: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "npu_healthwatch_chips_visible",
			Help: "Chips listed by the last readable npu-smi info.",
		}),
		failures: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "npu_healthwatch_consecutive_probe_failures",
			Help: "Failed probes in a row; the node is declared wedged at the failure threshold.",
		}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "npu_healthwatch_probes_total",
			Help: "Chip probes by result: ok, failed, or host_problem (npu-smi could not run; not counted as a failure).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "npu_healthwatch_probe_duration_seconds",
			Help:    "Time npu-smi info took, up to the probe timeout.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}),
		wedged: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "npu_healthwatch_wedged",
			Help: "1 while the node is marked wedged (marker removed, recovery pending).",
		}),
		hostProblem: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "npu_healthwatch_host_problem",
			Help: "1 while npu-smi cannot run on the node (missing, unable to load its libraries, no driver on this boot): a host problem, never a wedge; see the NPUHostProblem event.",
		}),
	}
	reg.MustRegister(m.chipHealthy, m.chips, m.failures, m.probes, m.duration, m.wedged, m.hostProblem)
	// Every result exists from the start, so increase() sees the first
	// failure and a dashboard's failure panel shows 0 rather than nothing.
	for _, r := range []string{"ok", "failed", "host_problem"} {
		m.probes.WithLabelValues(r)
	}
	return m
}

func (m *Metrics) observe(r Result, st State, wedged bool) {
	if m == nil {
		return
	}
	result := "ok"
	switch {
	case r.Problem != nil:
		result = "host_problem"
	case !r.OK:
		result = "failed"
	}
	m.hostProblem.Set(boolFloat(r.Problem != nil))
	m.probes.WithLabelValues(result).Inc()
	m.duration.Observe(r.Duration.Seconds())
	m.failures.Set(float64(st.Failures))
	m.wedged.Set(boolFloat(wedged))
	// A probe that printed no table says nothing about single chips; keep
	// the last known per-chip series rather than blanking them.
	if len(r.Info.Chips) == 0 {
		return
	}
	m.chips.Set(float64(len(r.Info.Chips)))
	m.chipHealthy.Reset()
	for _, c := range r.Info.Chips {
		m.chipHealthy.WithLabelValues(strconv.Itoa(c.NPU), strconv.Itoa(c.Chip), c.Name, string(c.Health)).Set(boolFloat(c.Health.Usable()))
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
