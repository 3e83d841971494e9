package chart_test

import (
	"strings"
	"testing"
)

const prometheusRuleAPI = "monitoring.coreos.com/v1/PrometheusRule"

// TestFleetExporterIsAnAlwaysOnReadOnlyDeployment: the default chart runs
// `npu-hooks exporter` as one replica preferring non-NPU nodes (its series
// must outlive an NPU node's reboot), with the chart's selectors and
// policy as flags, and a PodMonitor that selects its pods by their
// metrics port without relabelling node (its series carry their own)
// only when the Prometheus Operator is there; turned off, nothing of it.
func TestFleetExporterIsAnAlwaysOnReadOnlyDeployment(t *testing.T) {
	r := mustRender(t, variant{name: "api", opts: renderOpts{apiVersions: []string{podMonitorAPI}}})
	d := r.find("Deployment", "npu-stack-fleet-exporter")
	if d == nil {
		t.Fatalf("no Deployment npu-stack-fleet-exporter: %v", r.names("Deployment"))
	}
	if n := nested[float64](t, d, "spec", "replicas"); n != 1 {
		t.Errorf("replicas %v", n)
	}
	c, ok := containers(t, d, "containers")["exporter"]
	if !ok {
		t.Fatal("no exporter container")
	}
	args := strings.Join(toStrings(c["args"].([]any)), " ")
	for _, want := range []string{"exporter ", "--npu-node-selector=openfuyao.com/npu.present=true", "--auto-upgrade=false", "--reboot-timeout=1800s",
		"--record-selector=app.kubernetes.io/instance=npu-stack,app.kubernetes.io/component=rollout-record", "--metrics-addr=:9404"} {
		if !strings.Contains(args, want) {
			t.Errorf("exporter args lack %q: %s", want, args)
		}
	}
	aff := nested[[]any](t, d, "spec", "template", "spec", "affinity", "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
	if len(aff) != 1 || !strings.Contains(toString(aff[0]), "NotIn") {
		t.Errorf("the exporter does not prefer non-NPU nodes: %v", aff)
	}
	pm := r.find("PodMonitor", "npu-stack-fleet-exporter")
	if pm == nil {
		t.Fatalf("no PodMonitor for the fleet exporter: %v", r.names("PodMonitor"))
	}
	sel := nested[map[string]any](t, pm, "spec", "selector", "matchLabels")
	labels := nested[map[string]any](t, d, "spec", "template", "metadata", "labels")
	for k, v := range sel {
		if labels[k] != v {
			t.Errorf("PodMonitor selector %s=%v does not match the pods' labels %v", k, v, labels)
		}
	}
	if eps := toString(nested[[]any](t, pm, "spec", "podMetricsEndpoints")); strings.Contains(eps, "node") {
		t.Errorf("the fleet exporter's PodMonitor relabels node: %s", eps)
	}
	if got := mustRender(t, variant{name: "no-api"}).find("PodMonitor", "npu-stack-fleet-exporter"); got != nil {
		t.Error("fleet exporter PodMonitor rendered without the monitoring API")
	}
	off := mustRender(t, variant{name: "off", vals: map[string]any{"fleetExporter": map[string]any{"enabled": false}}, opts: renderOpts{apiVersions: []string{podMonitorAPI}}})
	if off.find("Deployment", "npu-stack-fleet-exporter") != nil || off.find("PodMonitor", "npu-stack-fleet-exporter") != nil || off.find("ServiceAccount", "npu-stack-fleet-exporter") != nil {
		t.Error("fleetExporter.enabled=false still renders the exporter")
	}
}

// TestRolloutRecordsWhatTheExporterReads: the rollout labels its records
// with what the exporter's --record-selector selects.
func TestRolloutRecordsWhatTheExporterReads(t *testing.T) {
	r := mustRender(t, variant{name: "default"})
	job := r.find("Job", "npu-stack-rollout")
	if job == nil {
		t.Fatal("no rollout Job")
	}
	args := strings.Join(toStrings(containers(t, job, "containers")["rollout"]["args"].([]any)), " ")
	if !strings.Contains(args, "--record-labels=app.kubernetes.io/instance=npu-stack,") {
		t.Errorf("the rollout labels its records without the release: %s", args)
	}
}

// TestPrometheusRuleOnlyWhereServedAndAsked: off by default; on, only
// where the API is served (or renderWithoutAPI); its labels are values.
func TestPrometheusRuleOnlyWhereServedAndAsked(t *testing.T) {
	api := renderOpts{apiVersions: []string{prometheusRuleAPI}}
	if mustRender(t, variant{name: "default", opts: api}).find("PrometheusRule", "npu-stack") != nil {
		t.Error("PrometheusRule rendered by default")
	}
	on := map[string]any{"prometheusRule": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}}}
	if mustRender(t, variant{name: "no-api", vals: on}).find("PrometheusRule", "npu-stack") != nil {
		t.Error("PrometheusRule rendered without the API")
	}
	pr := mustRender(t, variant{name: "on", vals: on, opts: api}).find("PrometheusRule", "npu-stack")
	if pr == nil {
		t.Fatal("no PrometheusRule with prometheusRule.enabled and the API served")
	}
	if pr.GetLabels()["release"] != "kube-prometheus-stack" || pr.GetLabels()["app.kubernetes.io/instance"] != "npu-stack" {
		t.Errorf("PrometheusRule labels %v", pr.GetLabels())
	}
}

func toStrings(in []any) []string {
	out := make([]string, len(in))
	for i, v := range in {
		out[i] = toString(v)
	}
	return out
}
