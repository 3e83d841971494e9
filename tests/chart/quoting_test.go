package chart_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Selectors with YAML's special sequences (": " starts a mapping, " #" a
// comment) reach the rollout and preflight intact: the chart quotes every
// argument it builds from values (issue 19).
func TestArgumentsFromValuesAreQuoted(t *testing.T) {
	awkward := map[string]string{
		"--canary-selector=":              "pool=canary #first wave",
		"--wait-for-completion-selector=": "batch: yes",
		"--drain-selector=":               "app: web # keep",
		"--reroll=":                       "dra/selector:app: dra #plugin",
	}
	policy := map[string]any{
		"canarySelector":    "pool=canary #first wave",
		"waitForCompletion": map[string]any{"podSelector": "batch: yes"},
		"drain":             map[string]any{"podSelector": "app: web # keep"},
		"rerollTargets":     []any{map[string]any{"namespace": "dra", "selector": "app: dra #plugin"}},
	}
	for _, mode := range []string{"hook", "job"} {
		r, err := render(t, map[string]any{"hooks": map[string]any{"mode": mode}, "driver": map[string]any{"upgradePolicy": policy}}, renderOpts{})
		if err != nil {
			t.Fatalf("mode %s: render with awkward selectors: %v", mode, err)
		}
		var seen int
		for _, o := range append(r.ofKind("Job"), r.ofKind("CronJob")...) {
			c, ok := containers(t, o, "containers")["rollout"]
			if !ok {
				continue
			}
			seen++
			wantArgs(t, o, strs(c["args"]), awkward)
		}
		if seen < 2 {
			t.Errorf("mode %s: %d rollout Jobs and CronJobs, want the rollout and its resume", mode, seen)
		}
		if mode != "hook" {
			continue
		}
		pre := r.find("Job", "npu-stack-preflight")
		if pre == nil {
			t.Fatal("no preflight Job")
		}
		wantArgs(t, pre, strs(containers(t, pre, "containers")["preflight"]["args"]), map[string]string{
			"--wait-for-completion-selector=": "batch: yes",
			"--drain-selector=":               "app: web # keep",
		})
	}
}

// wantArgs: args holds flag+value for each entry of want, whole.
func wantArgs(t *testing.T, o *unstructured.Unstructured, args []string, want map[string]string) {
	t.Helper()
	for flag, v := range want {
		if !hasArg(args, flag+v) {
			var got []string
			for _, a := range args {
				if strings.HasPrefix(a, flag) {
					got = append(got, a)
				}
			}
			t.Errorf("%s %s: want argument %q, got %q", o.GetKind(), o.GetName(), flag+v, got)
		}
	}
}

// A rollout that can never move is refused by the schema, with the field
// and the rule broken; the smallest values that can move are accepted.
func TestSchemaRefusesARolloutThatCannotMove(t *testing.T) {
	policy := func(k string, v any) map[string]any {
		return map[string]any{"driver": map[string]any{"upgradePolicy": map[string]any{k: v}}}
	}
	for _, tc := range []struct {
		name string
		vals map[string]any
		want []string
	}{
		{"maxUnavailable 0", policy("maxUnavailable", 0), []string{"/driver/upgradePolicy/maxUnavailable", "minimum: got 0, want 1"}},
		{"maxUnavailable 0%", policy("maxUnavailable", "0%"), []string{"/driver/upgradePolicy/maxUnavailable", "'0%' does not match pattern"}},
		{"maxUnavailable 00%", policy("maxUnavailable", "00%"), []string{"/driver/upgradePolicy/maxUnavailable", "does not match pattern"}},
		{"rebootTimeoutSeconds 0", policy("rebootTimeoutSeconds", 0), []string{"/driver/upgradePolicy/rebootTimeoutSeconds", "minimum: got 0, want 60"}},
		{"activeDeadlineSeconds 0", map[string]any{"hooks": map[string]any{"activeDeadlineSeconds": 0}}, []string{"/hooks/activeDeadlineSeconds", "minimum: got 0, want 60"}},
		{"npuPodDeletion timeout negative", policy("npuPodDeletion", map[string]any{"timeoutSeconds": -1}), []string{"/driver/upgradePolicy/npuPodDeletion/timeoutSeconds", "minimum: got -1, want 0"}},
	} {
		_, err := render(t, tc.vals, renderOpts{})
		if err == nil {
			t.Errorf("%s: rendered; the schema must refuse it", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: the refusal must say %q:\n%v", tc.name, w, err)
			}
		}
	}
	for _, v := range []any{1, "1%", "100%", 5, "50%"} {
		if _, err := render(t, policy("maxUnavailable", v), renderOpts{}); err != nil {
			t.Errorf("maxUnavailable %v can move and must be accepted: %v", v, err)
		}
	}
}
