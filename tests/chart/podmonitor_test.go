package chart_test

import (
	"fmt"
	"testing"
)

const podMonitorAPI = "monitoring.coreos.com/v1/PodMonitor"

// TestPodMonitorsFindTheAgentsMetricsPorts: with the Prometheus Operator's
// API served, the chart renders a PodMonitor per agent whose selector
// matches that agent's pods and whose port is a "metrics" port of theirs
// (the rebooter, and the watch container of every driver DaemonSet); not
// without the API, nor for an endpoint turned off.
func TestPodMonitorsFindTheAgentsMetricsPorts(t *testing.T) {
	if got := mustRender(t, variant{name: "no-api"}).ofKind("PodMonitor"); len(got) != 0 {
		t.Errorf("PodMonitors rendered without the monitoring API: %d", len(got))
	}
	r := mustRender(t, variant{name: "api", vals: mixedFleet, opts: renderOpts{apiVersions: []string{podMonitorAPI}}})
	targets := map[string]struct{ container, port string }{
		"npu-stack-rebooter":    {"rebooter", "9402"},
		"npu-stack-healthwatch": {"watch", "9403"},
	}
	for name, want := range targets {
		pm := r.find("PodMonitor", name)
		if pm == nil {
			t.Fatalf("no PodMonitor %s; %v", name, r.names("PodMonitor"))
		}
		sel := nested[map[string]any](t, pm, "spec", "selector", "matchLabels")
		if eps := nested[[]any](t, pm, "spec", "podMetricsEndpoints"); len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" {
			t.Errorf("%s endpoints %v", name, eps)
		}
		matched := 0
		for _, ds := range r.ofKind("DaemonSet") {
			labels := nested[map[string]any](t, ds, "spec", "template", "metadata", "labels")
			all := true
			for k, v := range sel {
				all = all && labels[k] == v
			}
			if !all {
				continue
			}
			matched++
			c, ok := containers(t, ds, "containers")[want.container]
			if !ok {
				t.Errorf("%s selects %s, which has no %s container", name, ds.GetName(), want.container)
				continue
			}
			found := false
			for _, p := range c["ports"].([]any) {
				pm := p.(map[string]any)
				found = found || (pm["name"] == "metrics" && toString(pm["containerPort"]) == want.port)
			}
			if !found {
				t.Errorf("%s selects %s, whose %s container has no port metrics=%s: %v", name, ds.GetName(), want.container, want.port, c["ports"])
			}
		}
		if matched == 0 {
			t.Errorf("%s (%v) selects no DaemonSet's pods", name, sel)
		}
	}
	off := mustRender(t, variant{name: "off", vals: map[string]any{"rebooter": map[string]any{"metricsPort": 0}, "healthWatch": map[string]any{"metricsPort": 0},
		"fleetExporter": map[string]any{"enabled": false}},
		opts: renderOpts{apiVersions: []string{podMonitorAPI}}})
	if got := off.ofKind("PodMonitor"); len(got) != 0 {
		t.Errorf("%d PodMonitors for endpoints turned off", len(got))
	}
}

// toString prints a decoded YAML number or string as written.
func toString(v any) string { return fmt.Sprint(v) }
