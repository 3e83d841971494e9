package docs_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the page's windows name their zones

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/hookcli"
	"github.com/openfuyao/npu-stack/internal/rollout"
	"github.com/openfuyao/npu-stack/internal/window"
)

// The moment and fleet of the maintenance-windows page's status example:
// Saturday 2 May 2026, 18:55 in Berlin, the local cluster's three nodes
// queued for 25.3.0 → 25.5.0 under the chart's default policy.
var windowsPageAt = time.Date(2026, 5, 2, 16, 55, 0, 0, time.UTC)

// TestWindowsPageShowsWhatStatusPrints: the `npu-hooks status` output on
// docs/schedule-maintenance-windows.md is what status prints, byte for byte, for
// the page's example values (their windows as the chart hands them to the
// rollout) at the page's moment. A change to the status format or to the
// window line fails here until the page shows the new one.
func TestWindowsPageShowsWhatStatusPrints(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "schedule-maintenance-windows.md"))
	if err != nil {
		t.Fatal(err)
	}
	shown := statusBlock(t, string(page))

	vals := valuesFile(t, filepath.Join(examplesDir(t), "values-maintenance-windows.yaml"))
	specs := renderedWindows(t, vals)
	sched, err := window.ParseAll(specs)
	if err != nil {
		t.Fatalf("the rollout refuses the chart's windows %q: %v", specs, err)
	}
	p := rollout.Policy{AutoUpgrade: true, MaxParallel: 1, MaxUnavailable: intstr.FromString("25%"), MaxFailures: 1, RebootTimeout: 30 * time.Minute, Windows: sched}
	var s rollout.Snapshot
	for _, name := range []string{"npu-0", "npu-1", "npu-2"} {
		s.Nodes = append(s.Nodes, rollout.NodeView{Name: name, State: contract.StateUpgradeRequired, RawState: string(contract.StateUpgradeRequired), StateKnown: true,
			Ready: true, Profile: "npu-operator/npu-stack-driver-910b", Desired: "25.5.0", Loaded: "25.3.0", Since: windowsPageAt.Add(-time.Minute)})
	}
	st := rollout.BuildStatus(s, rollout.Decide(s, p, contract.Keys{Domain: contract.DefaultDomain}, windowsPageAt), windowsPageAt)
	var out bytes.Buffer
	if err := hookcli.PrintStatus(&out, st, "table", "npu-operator"); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimRight(out.String(), "\n"); got != shown {
		t.Fatalf("docs/schedule-maintenance-windows.md shows a status that npu-hooks status does not print; it prints:\n%s\n\nthe page shows:\n%s", got, shown)
	}
}

// statusBlock is the page's ```text block that starts with status's
// header line, without the indentation of the step it is part of.
func statusBlock(t *testing.T, page string) string {
	t.Helper()
	lines := strings.Split(page, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "```text" || i+1 >= len(lines) {
			continue
		}
		indent := l[:len(l)-len(strings.TrimLeft(l, " "))]
		if !strings.HasPrefix(lines[i+1], indent+"NODE ") {
			continue
		}
		var body []string
		for _, b := range lines[i+1:] {
			if strings.TrimSpace(b) == "```" {
				return strings.Join(body, "\n")
			}
			body = append(body, strings.TrimPrefix(b, indent))
		}
	}
	t.Fatal("docs/schedule-maintenance-windows.md has no ```text block of `npu-hooks status` output")
	return ""
}

// renderedWindows are the --maintenance-window flags the chart gives the
// rollout for vals: those of the resume CronJob (the hook Job's are the
// same, and the policy ConfigMap holds them as one string).
func renderedWindows(t *testing.T, vals map[string]any) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rel, err := env.Helm("npu-operator").Render(ctx, "npu-stack", vals)
	if err != nil {
		t.Fatal(err)
	}
	var specs []string
	for _, line := range strings.Split(rel.Manifest, "\n") {
		line = strings.Trim(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "- ")), `"`)
		if spec, ok := strings.CutPrefix(line, "--maintenance-window="); ok {
			specs = append(specs, spec)
		}
	}
	if len(specs) == 0 {
		t.Fatal("the chart rendered no --maintenance-window for the page's example values")
	}
	return specs
}
