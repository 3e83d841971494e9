package alerts_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/openfuyao/npu-stack/tests/dashboard"
)

// TestDashboardHasThePanelsAskedFor: the panels issue 42 asks for.
func TestDashboardHasThePanelsAskedFor(t *testing.T) {
	d, err := dashboard.Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	have := strings.Join(d.Titles(), "\n")
	for _, want := range []string{"Nodes per upgrade state", "Nodes awaiting reboot approval", "Driver versions across the fleet",
		"Reboots by reason", "Chips unhealthy", "Probe failures"} {
		if !strings.Contains(have, want) {
			t.Errorf("the dashboard has no panel %q; it has:\n%s", want, have)
		}
	}
}

// TestDashboardQueriesParse hands every panel query to promtool, as the
// expressions of a rule file (`promtool check rules` parses each with
// Prometheus' own parser), after Grafana's interval variables are made
// concrete.
func TestDashboardQueriesParse(t *testing.T) {
	d, err := dashboard.Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	qs, err := d.Queries()
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	g := ruleGroup{Name: "dashboard"}
	for i, q := range qs {
		g.Rules = append(g.Rules, rule{Record: fmt.Sprintf("dashboard:query_%d:%s", i, q.RefID), Expr: q.PromQL("1m", "1h")})
	}
	rf.Groups = []ruleGroup{g}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	rf.write(t, path)
	out, err := exec.Command(promtool(t), "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules over the dashboard's %d queries: %v\n%s", len(qs), err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("%d rules found", len(qs))) {
		t.Errorf("promtool did not check all %d queries:\n%s", len(qs), out)
	}
}

// TestDashboardConfigMapForTheSidecar: the chart ships the file as is,
// in a ConfigMap with the sidecar's label, only when asked.
func TestDashboardConfigMapForTheSidecar(t *testing.T) {
	if object(t, renderChart(t, nil), "ConfigMap", "npu-stack-dashboard") != nil {
		t.Fatal("dashboard ConfigMap rendered by default")
	}
	cm := object(t, renderChart(t, map[string]any{"grafanaDashboard": map[string]any{"enabled": true}}), "ConfigMap", "npu-stack-dashboard")
	if cm == nil {
		t.Fatal("no ConfigMap npu-stack-dashboard with grafanaDashboard.enabled")
	}
	b, err := yaml.Marshal(cm)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Metadata.Labels["grafana_dashboard"] != "1" {
		t.Errorf("labels %v, want grafana_dashboard: \"1\"", got.Metadata.Labels)
	}
	want, err := os.ReadFile(filepath.Join(repoRoot(t), dashboard.File))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(got.Data["npu-stack-fleet.json"]) != strings.TrimSpace(string(want)) {
		t.Error("the ConfigMap's npu-stack-fleet.json differs from " + dashboard.File)
	}
}
