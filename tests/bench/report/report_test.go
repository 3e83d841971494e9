package report

import (
	"fmt"
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/tests/bench/steplat"
)

func TestStepCausesAreTheRecordedKinds(t *testing.T) {
	var kinds []string
	for _, k := range steplat.Kinds {
		kinds = append(kinds, string(k))
	}
	if fmt.Sprint(kinds) != fmt.Sprint(stepCauses) {
		t.Fatalf("report columns %q, steplat kinds %q", stepCauses, kinds)
	}
}

func TestMarkdownStepColumns(t *testing.T) {
	s := Scenario{Nodes: 10, Parallelism: "1", Effective: 1, Upgraded: 10, StepsByWhy: map[string]Latency{
		string(steplat.Rebooted):  {N: 10, P50: 0.004, P99: 0.012},
		string(steplat.Validated): {N: 10, P50: 0.02, P99: 1.5},
	}}
	md := Markdown(Report{Scenarios: []Scenario{s}})
	if !strings.Contains(md, "| 10 | 1 | 0 s | — | — | 4 ms / 12 ms | 20 ms / 1.5 s | — |") {
		t.Fatalf("step latency row missing:\n%s", md)
	}
}
