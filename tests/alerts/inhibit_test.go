package alerts_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// documentedInhibition is the ```yaml block of docs/observability.md's
// "Planned reboots do not page": what an admin adds to Alertmanager.
func documentedInhibition(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "### Planned reboots do not page")
	if !ok {
		t.Fatal("docs/observability.md has no section \"Planned reboots do not page\"")
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	if !ok {
		t.Fatal("the section has no ```yaml block")
	}
	block, _, _ = strings.Cut(block, "```")
	var m map[string]any
	if err := yaml.Unmarshal([]byte(block), &m); err != nil {
		t.Fatalf("the documented Alertmanager configuration is not YAML: %v", err)
	}
	return m
}

// alertmanagerConfig merges the documented block into the smallest
// configuration Alertmanager accepts (a default route and receiver), as
// an admin merges it into theirs.
func alertmanagerConfig(t *testing.T) string {
	t.Helper()
	doc := documentedInhibition(t)
	route, _ := doc["route"].(map[string]any)
	receivers, _ := doc["receivers"].([]any)
	cfg := map[string]any{
		"route":         map[string]any{"receiver": "default", "routes": route["routes"]},
		"receivers":     append([]any{map[string]any{"name": "default"}}, receivers...),
		"inhibit_rules": doc["inhibit_rules"],
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "alertmanager.yml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// plannedRebootLabels are the labels NPUStackPlannedReboot fires with in
// testdata/rules_test.yaml (what promtool checked the rule gives), plus
// its alertname.
func plannedRebootLabels(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []struct {
					ExpLabels map[string]string `json:"exp_labels"`
				} `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	for _, tc := range f.Tests {
		for _, c := range tc.AlertRuleTest {
			if c.Alertname == "NPUStackPlannedReboot" && len(c.ExpAlerts) > 0 {
				l := c.ExpAlerts[0].ExpLabels
				l["alertname"] = c.Alertname
				return l
			}
		}
	}
	t.Fatal("testdata/rules_test.yaml has no firing NPUStackPlannedReboot case")
	return nil
}

// TestPlannedRebootInhibitsNodeAlerts loads the documented Alertmanager
// configuration with Alertmanager's own code (v0.35.0, ci/engines/
// alertmanager): amtool check-config accepts it and routes
// NPUStackPlannedReboot to the null receiver; its inhibit rule, applied
// to the labels NPUStackPlannedReboot fires with for node npu-1, mutes
// that node's KubeNodeNotReady, KubeNodeUnreachable,
// KubeNodeReadinessFlapping (with the labels kube-prometheus' rules give
// them) and NPUStackAgentDown, and mutes neither another node's nor
// another alert of npu-1.
func TestPlannedRebootInhibitsNodeAlerts(t *testing.T) {
	amtool, err := testbed.Engine("alertmanager/amtool")
	if err != nil {
		t.Fatal(err)
	}
	check, err := testbed.Engine("alertmanager/npu-inhibit-check")
	if err != nil {
		t.Fatal(err)
	}
	cfg := alertmanagerConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, amtool, "check-config", cfg).CombinedOutput(); err != nil {
		t.Fatalf("amtool check-config rejects the documented configuration: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, amtool, "config", "routes", "test", "--config.file="+cfg, "alertname=NPUStackPlannedReboot", "node=npu-1").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "null" {
		t.Fatalf("NPUStackPlannedReboot routes to %q (%v), want the null receiver", strings.TrimSpace(string(out)), err)
	}

	source := plannedRebootLabels(t)
	if source["node"] != "npu-1" {
		t.Fatalf("NPUStackPlannedReboot case fires for %v, want node npu-1", source)
	}
	ksm := func(alert, node string, extra map[string]string) map[string]string {
		l := map[string]string{"alertname": alert, "node": node, "severity": "warning", "job": "kube-state-metrics",
			"namespace": "monitoring", "service": "kube-state-metrics", "instance": "10.0.0.9:8443", "container": "kube-rbac-proxy-main", "endpoint": "https-main"}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	type target struct {
		labels map[string]string
		muted  bool
	}
	targets := []target{
		{ksm("KubeNodeNotReady", "npu-1", map[string]string{"condition": "Ready", "status": "true"}), true},
		{ksm("KubeNodeUnreachable", "npu-1", map[string]string{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}), true},
		{map[string]string{"alertname": "KubeNodeReadinessFlapping", "node": "npu-1", "severity": "warning"}, true},
		{map[string]string{"alertname": "NPUStackAgentDown", "node": "npu-1", "job": "npu-operator/npu-stack-rebooter", "severity": "warning"}, true},
		{ksm("KubeNodeNotReady", "npu-2", map[string]string{"condition": "Ready", "status": "true"}), false},
		{map[string]string{"alertname": "NPUStackAgentDown", "node": "npu-2", "job": "npu-operator/npu-stack-rebooter", "severity": "warning"}, false},
		{map[string]string{"alertname": "NPUChipUnhealthy", "node": "npu-1", "npu": "3", "chip": "0", "severity": "warning"}, false},
		{source, false},
	}
	in := map[string]any{"sources": []map[string]string{source}}
	var tl []map[string]string
	for _, tg := range targets {
		tl = append(tl, tg.labels)
	}
	in["targets"] = tl
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	alerts := filepath.Join(t.TempDir(), "alerts.json")
	if err := os.WriteFile(alerts, b, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := exec.CommandContext(ctx, check, cfg, alerts).Output()
	if err != nil {
		t.Fatalf("npu-inhibit-check: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(res)))
	i := 0
	for sc.Scan() {
		var v struct {
			Labels  map[string]string `json:"labels"`
			MutedBy []string          `json:"mutedBy"`
		}
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		if i >= len(targets) {
			t.Fatalf("more verdicts than targets: %s", res)
		}
		if got := len(v.MutedBy) > 0; got != targets[i].muted {
			t.Errorf("%s on %s: muted %v (by %v) while npu-1 reboots on purpose; want %v", v.Labels["alertname"], v.Labels["node"], got, v.MutedBy, targets[i].muted)
		}
		i++
	}
	if i != len(targets) {
		t.Fatalf("%d verdicts for %d targets", i, len(targets))
	}
}
