package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/openfuyao/npu-stack/tests/bench/report"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// Rerender reads one or more results.json (the runs of fleet sizes run
// apart with -nodes), re-evaluates the targets and writes results.md and
// results.json to dir. Scenarios are concatenated in the order given;
// the agent and wedge figures are the last run's that has them; the date
// lists every run's.
func Rerender(jsonPaths []string, dir string) (report.Report, error) {
	var r report.Report
	var dates []string
	for _, p := range jsonPaths {
		var one report.Report
		b, err := os.ReadFile(p)
		if err != nil {
			return r, fmt.Errorf("read %s: %w", p, err)
		}
		if err := json.Unmarshal(b, &one); err != nil {
			return r, fmt.Errorf("decode %s: %w", p, err)
		}
		if len(jsonPaths) > 1 && r.Mode != "" && (one.Mode != r.Mode || one.Machine != r.Machine) {
			return r, fmt.Errorf("%s is a %s run on %+v, the others %s on %+v: not one table", p, one.Mode, one.Machine, r.Mode, r.Machine)
		}
		// One table is one commit: rows measured at different commits
		// compare different code.
		if len(jsonPaths) > 1 && r.Mode != "" && (one.Commit != r.Commit || one.Commit == "" || strings.HasSuffix(one.Commit, "-dirty")) {
			return r, fmt.Errorf("%s was measured at commit %q, the others at %q: not one table (re-run the fleet sizes at one clean commit)", p, one.Commit, r.Commit)
		}
		r.Mode, r.Machine, r.Commit = one.Mode, one.Machine, one.Commit
		if one.PeerLibrary != "" {
			r.PeerLibrary = one.PeerLibrary
		}
		dates = append(dates, one.Date)
		r.Scenarios = append(r.Scenarios, one.Scenarios...)
		if len(one.Agents) > 0 {
			r.Agents, r.Wedge = one.Agents, one.Wedge
		}
		for _, n := range one.Notes {
			if !slices.Contains(r.Notes, n) {
				r.Notes = append(r.Notes, n)
			}
		}
	}
	r.Date = strings.Join(dates, " and ")
	r.Targets = report.Targets(r)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, fmt.Errorf("output dir %s: %w", dir, err)
	}
	return r, write(dir, r)
}

// commitOf names the checkout measured: its HEAD, "-dirty" when it has
// uncommitted changes.
func commitOf(ctx context.Context) (string, error) {
	root, err := testbed.RepoRoot()
	if err != nil {
		return "", err
	}
	head, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse HEAD in %s: %w", root, err)
	}
	status, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		return "", fmt.Errorf("git status in %s: %w", root, err)
	}
	return describeCommit(string(head), string(status)), nil
}

// describeCommit is the commit with "-dirty" when status lists changes.
func describeCommit(head, status string) string {
	c := strings.TrimSpace(head)
	if strings.TrimSpace(status) != "" {
		c += "-dirty"
	}
	return c
}
