package chart_test

import (
	"reflect"
	"testing"
)

// TestHookPlacementReachesEveryHookPod: hooks.nodeSelector and
// hooks.tolerations place every hook pod (preflight, rollout hook, resume
// CronJob, job-mode rollout, uninstall) and no node agent, which must
// stay on the NPU nodes; unset, the hook pods carry no nodeSelector and
// only the preference for non-NPU nodes.
func TestHookPlacementReachesEveryHookPod(t *testing.T) {
	sel := map[string]any{"node-role.kubernetes.io/infra": ""}
	tol := []any{map[string]any{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}}
	hookPods := []struct{ kind, name string }{
		{"Job", "npu-stack-preflight"},
		{"CronJob", "npu-stack-rollout-resume"},
		{"Job", "npu-stack-uninstall"},
	}
	for _, mode := range []string{"hook", "job"} {
		placed := mustRender(t, variant{name: "placed-" + mode, vals: map[string]any{
			"hooks":     map[string]any{"mode": mode, "nodeSelector": sel, "tolerations": tol},
			"uninstall": map[string]any{"cleanup": true},
		}})
		plain := mustRender(t, variant{name: "plain-" + mode, vals: map[string]any{
			"hooks":     map[string]any{"mode": mode},
			"uninstall": map[string]any{"cleanup": true},
		}})
		var rollout []struct{ kind, name string }
		for _, j := range placed.ofKind("Job") {
			if j.GetLabels()["app.kubernetes.io/component"] == "rollout" {
				rollout = append(rollout, struct{ kind, name string }{"Job", j.GetName()})
			}
		}
		if len(rollout) != 1 {
			t.Fatalf("%s mode: %d rollout Jobs", mode, len(rollout))
		}
		for _, h := range append(hookPods, rollout...) {
			o := placed.find(h.kind, h.name)
			if o == nil {
				t.Fatalf("%s mode: no %s %s: %v", mode, h.kind, h.name, placed.names(h.kind))
			}
			spec := podSpec(t, o)
			if !reflect.DeepEqual(spec["nodeSelector"], sel) || !reflect.DeepEqual(spec["tolerations"], tol) {
				t.Errorf("%s mode: %s %s nodeSelector %v tolerations %v, want %v %v", mode, h.kind, h.name, spec["nodeSelector"], spec["tolerations"], sel, tol)
			}
			if spec["affinity"] == nil {
				t.Errorf("%s mode: %s %s lost its preference for non-NPU nodes", mode, h.kind, h.name)
			}
			if p := plain.find(h.kind, h.name); p != nil {
				if ps := podSpec(t, p); ps["nodeSelector"] != nil || ps["tolerations"] != nil {
					t.Errorf("%s mode, defaults: %s %s has nodeSelector %v tolerations %v", mode, h.kind, h.name, ps["nodeSelector"], ps["tolerations"])
				}
			}
		}
		for _, ds := range placed.ofKind("DaemonSet") {
			if ns, _ := podSpec(t, ds)["nodeSelector"].(map[string]any); ns != nil {
				if _, ok := ns["node-role.kubernetes.io/infra"]; ok {
					t.Errorf("DaemonSet %s took the hooks' nodeSelector", ds.GetName())
				}
			}
		}
	}
}
