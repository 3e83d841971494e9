package alerts_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/internal/fleetmetrics"
	"github.com/openfuyao/npu-stack/tests/dashboard"
)

// TestObservabilityListsEveryAlertAndSeries: docs/observability.md has a
// row for every alert the chart renders, linking its runbook (the same
// troubleshooting.md section as its runbook_url), and a row for every
// series the fleet exporter declares and every series an alert or a
// dashboard panel reads.
func TestObservabilityListsEveryAlertAndSeries(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // first cell's `name` → row
	first := regexp.MustCompile("^\\| `([A-Za-z_:]+)` \\|")
	for _, l := range strings.Split(string(b), "\n") {
		if m := first.FindStringSubmatch(l); m != nil {
			rows[m[1]] = l
		}
	}

	rf := alertRules(t, nil)
	for _, a := range rf.alerts() {
		row, ok := rows[a.Alert]
		if !ok {
			t.Errorf("docs/observability.md has no row for the alert %s", a.Alert)
			continue
		}
		if link := "(troubleshooting.md#" + strings.ToLower(a.Alert) + ")"; !strings.Contains(row, link) {
			t.Errorf("docs/observability.md's row of %s does not link its runbook %s: %s", a.Alert, link, row)
		}
	}

	series := map[string]string{}
	for _, d := range fleetmetrics.Metrics() {
		series[d.Name] = "the fleet exporter"
	}
	name := regexp.MustCompile(`\bnpu_[a-z_]+`)
	// A histogram's series are documented under its name.
	base := func(s string) string {
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			s = strings.TrimSuffix(s, suf)
		}
		return s
	}
	for _, a := range rf.alerts() {
		for _, s := range name.FindAllString(a.Expr, -1) {
			series[base(s)] = "alert " + a.Alert
		}
	}
	d, err := dashboard.Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	qs, err := d.Queries()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		for _, s := range name.FindAllString(q.Expr, -1) {
			series[base(s)] = "dashboard panel " + q.Panel
		}
	}
	if len(series) < len(fleetmetrics.Metrics())+5 {
		t.Fatalf("only %d series found in the fleet exporter, the alerts and the dashboard: %v", len(series), series)
	}
	for s, from := range series {
		if _, ok := rows[s]; !ok {
			t.Errorf("docs/observability.md has no row for %s (read by %s)", s, from)
		}
	}
}
