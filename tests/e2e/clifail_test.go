package e2e_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// runCLIFailures: what a helm CLI or helmfile user sees when an upgrade fails, and the
// documented retry bringing the fleet home, on the story's fleet (every
// node on v1 after two reboots):
//   - preflight refuses (the new driver's image is not mirrored): `helm
//     upgrade` fails "pre-upgrade hooks failed" with the preflight Job's
//     log naming the missing image, `helm status` says failed, no node
//     touched; mirror the image and run the same upgrade again;
//   - the rollout past its deadline (nobody approves): `helm upgrade`
//     fails "post-upgrade hooks failed"; approve and upgrade again with
//     the deadline restored.
//
// Each ends with every node on the new driver, rebooted exactly once more.
//
// upgrade runs the engine's upgrade with the story's values and sets
// (key=value) over them: `helm upgrade --reuse-values --set`, `helmfile
// sync --set`.
func runCLIFailures(ctx context.Context, t *testing.T, s *stack, h *helmCLI, upgrade func(sets ...string) (string, error)) {
	reboots := 2
	vRefused, _, vDeadline := s.failVersions()
	s.preCordoned = ""
	kubectl(ctx, t, "kubectl uncordon "+s.nodes[0].Name())
	step := func(name string, f func()) {
		start := time.Now()
		f()
		t.Logf("failure story %s: %.0f s", name, time.Since(start).Seconds())
	}

	step("PreflightRefuses", func() {
		out, err := upgrade("driver.version=" + vRefused)
		if err == nil || !strings.Contains(out, "pre-upgrade hooks failed") || !strings.Contains(out, "no such tag") {
			t.Errorf("helm upgrade to an unmirrored driver: err %v, want \"pre-upgrade hooks failed\" and the preflight log's \"no such tag\":\n%s", err, tail(out, 30))
		}
		t.Logf("the user's terminal:\n%s", tail(out, 12))
		h.checkStatus(ctx, t, "failed", "pre-upgrade hooks failed")
		s.checkNodes(ctx, v1, reboots)
		s.mirror(ctx, vRefused)
		stop := s.approveEach(ctx)
		if out, err := upgrade("driver.version=" + vRefused); err != nil {
			t.Fatalf("the retry: %v\n%s", err, out)
		}
		stop()
		reboots++
		s.check(ctx, vRefused, reboots)
		h.checkStatus(ctx, t, "deployed", "Upgrade complete")
	})

	step("RolloutPastDeadline", func() {
		s.mirror(ctx, vDeadline)
		out, err := upgrade("driver.version="+vDeadline, "hooks.activeDeadlineSeconds=60")
		if err == nil || !strings.Contains(out, "post-upgrade hooks failed") {
			t.Errorf("helm upgrade whose rollout outlives its deadline: err %v, want \"post-upgrade hooks failed\":\n%s", err, tail(out, 30))
		}
		t.Logf("the user's terminal:\n%s", tail(out, 12))
		h.checkStatus(ctx, t, "failed", "post-upgrade hooks failed")
		kubectl(ctx, t, s.approveAll())
		if out, err := upgrade("driver.version="+vDeadline, "hooks.activeDeadlineSeconds=7200"); err != nil {
			t.Fatalf("the retry: %v\n%s", err, out)
		}
		reboots++
		s.check(ctx, vDeadline, reboots)
		h.checkStatus(ctx, t, "deployed", "Upgrade complete")
	})
}

// checkStatus reads `helm status -o json`: the release's status and
// description.
func (h *helmCLI) checkStatus(ctx context.Context, t *testing.T, status, description string) {
	t.Helper()
	out, err := h.run(ctx, "status", h.s.release, "-n", h.s.ns, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Info struct {
			Status      string `json:"status"`
			Description string `json:"description"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("helm status -o json: %v\n%s", err, tail(out, 10))
	}
	t.Logf("helm status: %s: %s", st.Info.Status, st.Info.Description)
	if st.Info.Status != status || !strings.Contains(st.Info.Description, description) {
		t.Errorf("helm status: %s %q, want %s %q", st.Info.Status, st.Info.Description, status, description)
	}
}

// helmUpgrade is the helm CLI user's upgrade: only what changes is set.
func (h *helmCLI) helmUpgrade(ctx context.Context) func(sets ...string) (string, error) {
	return func(sets ...string) (string, error) {
		args := append([]string{"upgrade", h.s.release}, h.chart...)
		args = append(args, "-n", h.s.ns, "--reuse-values", "--timeout", "15m")
		for _, set := range sets {
			args = append(args, "--set", set)
		}
		return h.run(ctx, append(args, h.extra...)...)
	}
}
