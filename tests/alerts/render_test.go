package alerts_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"
)

// repoRoot is the checkout this test runs in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// renderChart renders the chart as `helm install --dry-run` (client
// only) does, with the Prometheus Operator's API served, and returns its
// manifests.
func renderChart(t *testing.T, vals map[string]any) string {
	t.Helper()
	c, err := loader.Load(filepath.Join(repoRoot(t), "charts", "npu-stack"))
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "npu-stack", "npu-operator"
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.1", Major: "1", Minor: "37"}
	inst.APIVersions = chartutil.VersionSet{"monitoring.coreos.com/v1/PrometheusRule", "monitoring.coreos.com/v1/PodMonitor"}
	rel, err := inst.RunWithContext(context.Background(), c, vals)
	if err != nil {
		t.Fatalf("render the chart: %v", err)
	}
	return rel.Manifest
}

// object returns the rendered object of kind named name, nil if none.
func object(t *testing.T, manifest, kind, name string) map[string]any {
	t.Helper()
	for _, doc := range strings.Split(manifest, "\n---") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("rendered manifest: %v", err)
		}
		meta, _ := o["metadata"].(map[string]any)
		if o["kind"] == kind && meta != nil && meta["name"] == name {
			return o
		}
	}
	return nil
}

// alertRules renders the chart's PrometheusRule with vals on top of
// prometheusRule.enabled and returns its rule groups as a Prometheus rule
// file (what the operator hands Prometheus).
func alertRules(t *testing.T, vals map[string]any) ruleFile {
	t.Helper()
	if vals == nil {
		vals = map[string]any{}
	}
	pr, _ := vals["prometheusRule"].(map[string]any)
	if pr == nil {
		pr = map[string]any{}
	}
	pr["enabled"] = true
	vals["prometheusRule"] = pr
	o := object(t, renderChart(t, vals), "PrometheusRule", "npu-stack")
	if o == nil {
		t.Fatal("the chart renders no PrometheusRule npu-stack with prometheusRule.enabled and the API served")
	}
	b, err := yaml.Marshal(o["spec"])
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("the PrometheusRule's spec is no rule file: %v", err)
	}
	return rf
}

// ruleFile is a Prometheus rule file.
type ruleFile struct {
	Groups []ruleGroup `json:"groups"`
}

type ruleGroup struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

type rule struct {
	Alert         string            `json:"alert,omitempty"`
	Record        string            `json:"record,omitempty"`
	Expr          string            `json:"expr"`
	For           string            `json:"for,omitempty"`
	KeepFiringFor string            `json:"keep_firing_for,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

func (rf ruleFile) alerts() []rule {
	var out []rule
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

func (rf ruleFile) write(t *testing.T, path string) {
	t.Helper()
	b, err := yaml.Marshal(rf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
