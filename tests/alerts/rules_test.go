// Package alerts_test checks the chart's alerts and dashboard with the
// real tools: `promtool test rules` over the rendered PrometheusRule
// (every alert firing and not firing, and every case failing once its
// rule is broken), promtool's parser over every dashboard query, and the
// runbooks and docs each alert links to.
package alerts_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// promtool is the promtool ci/build-engines.sh built (ci/engines/prometheus).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := testbed.Engine("prometheus/promtool")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testRules runs `promtool test rules` on testdata/rules_test.yaml with
// rf as its rules.yaml; it returns promtool's output and whether it passed.
func testRules(t *testing.T, rf ruleFile) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	rf.write(t, filepath.Join(dir, "rules.yaml"))
	cases, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), cases, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool(t), "test", "rules", "rules_test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// TestAlertRules renders the chart's PrometheusRule with its defaults
// and runs promtool's unit tests of it: `promtool check rules` first (the
// file is valid), then `promtool test rules` (every alert fires where it
// must, with the labels and annotations it must have, and stays quiet
// where it must).
func TestAlertRules(t *testing.T) {
	rf := alertRules(t, nil)
	dir := t.TempDir()
	rf.write(t, filepath.Join(dir, "rules.yaml"))
	out, err := exec.Command(promtool(t), "check", "rules", filepath.Join(dir, "rules.yaml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if got, ok := testRules(t, rf); !ok {
		t.Fatalf("promtool test rules failed:\n%s", got)
	}
}

// TestEveryAlertHasFiringAndQuietCases reads testdata/rules_test.yaml:
// each alert the chart renders has an evaluation where it fires and one
// where it does not.
func TestEveryAlertHasFiringAndQuietCases(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range f.Tests {
		for _, c := range tc.AlertRuleTest {
			if len(c.ExpAlerts) > 0 {
				firing[c.Alertname] = true
			} else {
				quiet[c.Alertname] = true
			}
		}
	}
	for _, a := range alertRules(t, nil).alerts() {
		if !firing[a.Alert] || !quiet[a.Alert] {
			t.Errorf("%s: testdata/rules_test.yaml has a firing case %v and a quiet case %v; want both", a.Alert, firing[a.Alert], quiet[a.Alert])
		}
	}
}

// TestEveryCaseCatchesItsRuleBroken breaks one alert at a time, its
// expression made one that never returns anything (the firing cases must
// catch it) and then one that always does (the quiet cases must), and
// requires `promtool test rules` to fail, naming that alert: no case
// passes whatever its rule says.
func TestEveryCaseCatchesItsRuleBroken(t *testing.T) {
	rf := alertRules(t, nil)
	for gi, g := range rf.Groups {
		for ri, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			for _, m := range []struct{ name, expr string }{{"never fires", "absent(vector(1))"}, {"always fires", "vector(1)"}} {
				t.Run(r.Alert+"/"+m.name, func(t *testing.T) {
					breakRule(t, rf, gi, ri, m.expr)
				})
			}
		}
	}
}

// breakRule replaces the expression of rule ri of group gi and requires
// promtool test rules to fail on that alert.
func breakRule(t *testing.T, rf ruleFile, gi, ri int, expr string) {
	t.Helper()
	r := rf.Groups[gi].Rules[ri]
	broken := deepCopy(t, rf)
	broken.Groups[gi].Rules[ri].Expr = expr
	out, ok := testRules(t, broken)
	if ok {
		t.Fatalf("promtool test rules passes with %s broken (expr %q); its cases do not test it", r.Alert, expr)
	}
	if !strings.Contains(out, "alertname: "+r.Alert) && !strings.Contains(out, r.Alert) {
		t.Fatalf("promtool fails with %s broken but names another alert:\n%s", r.Alert, out)
	}
	if testing.Verbose() {
		t.Logf("%s broken (expr %q): promtool test rules fails:\n%s", r.Alert, expr, firstLines(out, 12))
	}
}

func deepCopy(t *testing.T, rf ruleFile) ruleFile {
	t.Helper()
	b, err := yaml.Marshal(rf)
	if err != nil {
		t.Fatal(err)
	}
	var out ruleFile
	if err := yaml.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// TestAlertsFollowTheConventions checks what kube-prometheus' alerts
// carry: a severity label (critical, warning, info or none), a summary
// and a description, and a runbook_url, here into
// docs/troubleshooting.md at a section that exists; the summary names the
// node (or, for fleet-wide alerts, the Job or the exporter).
func TestAlertsFollowTheConventions(t *testing.T) {
	anchors := headingAnchors(t, filepath.Join(repoRoot(t), "docs", "troubleshooting.md"))
	base := "https://github.com/openfuyao/npu-stack/blob/main/docs/troubleshooting.md#"
	for _, a := range alertRules(t, nil).alerts() {
		switch a.Labels["severity"] {
		case "critical", "warning", "info", "none":
		default:
			t.Errorf("%s: severity %q", a.Alert, a.Labels["severity"])
		}
		if a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
			t.Errorf("%s: summary %q, description %q", a.Alert, a.Annotations["summary"], a.Annotations["description"])
		}
		u := a.Annotations["runbook_url"]
		if !strings.HasPrefix(u, base) || !anchors[strings.TrimPrefix(u, base)] {
			t.Errorf("%s: runbook_url %q is not a section of docs/troubleshooting.md", a.Alert, u)
		}
		if s := a.Annotations["summary"]; !strings.Contains(s, "$labels.node") && a.Alert != "NPURolloutJobFailed" && a.Alert != "NPUFleetExporterDown" {
			t.Errorf("%s: summary %q does not name the node", a.Alert, s)
		}
	}
	// The base URL is a value.
	rf := alertRules(t, map[string]any{"prometheusRule": map[string]any{"runbookBaseURL": "https://docs.example.com/npu/troubleshooting/"}})
	for _, a := range rf.alerts() {
		if want := "https://docs.example.com/npu/troubleshooting#" + strings.ToLower(a.Alert); a.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q with runbookBaseURL set, want %q", a.Alert, a.Annotations["runbook_url"], want)
		}
	}
}

// headingAnchors are the GitHub anchors of a Markdown file's headings.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	drop := regexp.MustCompile("[^a-z0-9 _-]")
	for _, l := range bytes.Split(b, []byte("\n")) {
		s := string(l)
		if !strings.HasPrefix(s, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(s, "#")))
		out[strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")] = true
	}
	return out
}
