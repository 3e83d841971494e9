package e2e_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// failVersions are the driver versions of a stack's failure stories, each
// a new driver change: unique to the stack (its fleet's number), so that
// the image one story mirrors never lets another's preflight pass.
func (s *stack) failVersions() (refused, killed, deadline string) {
	n, err := strconv.Atoi(s.fleet[strings.LastIndex(s.fleet, "-")+1:])
	if err != nil {
		s.t.Fatalf("fleet %q does not end in its number: %v", s.fleet, err)
	}
	return fmt.Sprintf("25.6.%d", n), fmt.Sprintf("25.7.%d", n), fmt.Sprintf("25.8.%d", n)
}

// fluxForce is docs/deployers.md's retry of a stalled HelmRelease: what
// `flux reconcile helmrelease npu-stack -n flux-system --force` writes.
const fluxForce = `t=$(date +%s%N); kubectl -n flux-system annotate helmrelease npu-stack --overwrite reconcile.fluxcd.io/requestedAt=$t reconcile.fluxcd.io/forceAt=$t`

// runFluxFailures: what a Flux user sees when an upgrade fails, and the
// documented retry bringing the fleet home, on the story's fleet (every
// node on v1 after two reboots) and HelmRelease:
//   - preflight refuses (the new driver's image is not mirrored):
//     UpgradeFailed "pre-upgrade hooks failed", Stalled RetriesExceeded, no
//     node touched; mirror the image, force a reconcile, approve;
//   - helm-controller killed (SIGKILL) while the rollout hook waits for
//     approvals: the release is left pending-upgrade, the rollout Job goes
//     on; approve; restarted, helm-controller unlocks the release and
//     upgrades again by itself: Ready UpgradeSucceeded, no retry needed;
//   - the rollout past its deadline (nobody approves): UpgradeFailed
//     "post-upgrade hooks failed", the Job's DeadlineExceeded; approve and
//     apply the values again with the deadline restored.
//
// Each ends with every node on the new driver, rebooted exactly once more.
func runFluxFailures(ctx context.Context, t *testing.T, s *stack, d *fluxDeployer) {
	reboots := 2
	vRefused, vKilled, vDeadline := s.failVersions()
	s.preCordoned = "" // the story's pre-cordoned node stays cordoned; no new invariant on it
	kubectl(ctx, t, "kubectl uncordon "+s.nodes[0].Name())

	step := func(name string, f func()) {
		start := time.Now()
		f()
		t.Logf("failure story %s: %.0f s", name, time.Since(start).Seconds())
	}

	step("PreflightRefuses", func() {
		s.setVersion(vRefused)
		d.applyValues(ctx, t, s.vals)
		hr := d.waitFailed(ctx, t, "pre-upgrade hooks failed")
		t.Logf("HelmRelease: %s", fluxState(hr))
		log := kubectl(ctx, t, "kubectl -n npu-operator logs job/npu-stack-preflight")
		if !strings.Contains(log, "no such tag") || !strings.Contains(log, vRefused) {
			t.Errorf("the preflight Job's log does not name the missing %s image:\n%s", vRefused, tail(log, 20))
		}
		s.checkNodes(ctx, v1, reboots) // refused before any node was touched
		s.mirror(ctx, vRefused)
		d.retry(ctx, t, s, vRefused)
		reboots++
		s.check(ctx, vRefused, reboots)
	})

	step("ControllerKilledMidRollout", func() {
		s.mirror(ctx, vKilled)
		s.setVersion(vKilled)
		d.applyValues(ctx, t, s.vals)
		s.waitRebootAsked(ctx) // the post-upgrade rollout hook runs
		if err := d.flux.KillHelmController(); err != nil {
			t.Fatal(err)
		}
		pending := kubectl(ctx, t, "kubectl -n flux-system get secret -l owner=helm,name=npu-stack,status=pending-upgrade -o name")
		if strings.TrimSpace(pending) == "" {
			t.Errorf("helm-controller killed mid-hook: no Helm release left pending-upgrade")
		}
		// The rollout Job is the cluster's, not helm-controller's: it
		// goes on, and the approvals bring the fleet home.
		kubectl(ctx, t, s.approveAll())
		s.waitFleet(ctx, vKilled)
		if err := d.flux.StartHelmController(ctx); err != nil {
			t.Fatal(err)
		}
		// On start helm-controller finds the release locked
		// (pending-upgrade), marks it failed and runs the upgrade again:
		// the hooks run again and the rollout finds the fleet home.
		hr := d.waitVerdict(ctx, t)
		t.Logf("HelmRelease after the restart: %s", fluxState(hr))
		if ready := testbed.StatusCondition(hr, "Ready"); ready["status"] != "True" || ready["reason"] != "UpgradeSucceeded" {
			t.Errorf("after the restart helm-controller says %s; want Ready=True UpgradeSucceeded (else: %s)", fluxState(hr), fluxForce)
			d.retry(ctx, t, s, vKilled)
		}
		reboots++
		s.check(ctx, vKilled, reboots)
	})

	step("RolloutPastDeadline", func() {
		s.mirror(ctx, vDeadline)
		s.setVersion(vDeadline)
		hooks := s.vals["hooks"].(map[string]any)
		deadline := hooks["activeDeadlineSeconds"]
		hooks["activeDeadlineSeconds"] = 60 // the schema's minimum; nobody approves
		d.applyValues(ctx, t, s.vals)
		hr := d.waitFailed(ctx, t, "post-upgrade hooks failed")
		t.Logf("HelmRelease: %s", fluxState(hr))
		hooks["activeDeadlineSeconds"] = deadline
		kubectl(ctx, t, s.approveAll())
		d.applyValues(ctx, t, s.vals) // a new generation: a new upgrade
		d.waitDeployed(ctx, t)
		reboots++
		s.check(ctx, vDeadline, reboots)
	})
}

// applyValues writes vals as the user's values patch and applies the
// kustomization.
func (d *fluxDeployer) applyValues(ctx context.Context, t *testing.T, vals map[string]any) {
	t.Helper()
	d.writeKustomization(t, normalize(t, withRegistry(vals)), true)
	kubectl(ctx, t, "kubectl apply -k "+d.dir)
}

// waitFailed waits for helm-controller's verdict on the current
// generation: Ready=False and Stalled=True RetriesExceeded (remediation
// retries 0), Ready's message containing msg.
func (d *fluxDeployer) waitFailed(ctx context.Context, t *testing.T, msg string) *unstructured.Unstructured {
	t.Helper()
	hr, err := d.flux.WaitHelmRelease(ctx, fluxNS, d.s.release, func(hr *unstructured.Unstructured) (bool, error) {
		observed, _, _ := unstructured.NestedInt64(hr.Object, "status", "observedGeneration")
		ready, stalled := testbed.StatusCondition(hr, "Ready"), testbed.StatusCondition(hr, "Stalled")
		if observed != hr.GetGeneration() || ready == nil || ready["status"] != "False" || stalled == nil || stalled["status"] != "True" {
			return false, fmt.Errorf("not stalled yet: %s", fluxState(hr))
		}
		if m, _ := ready["message"].(string); !strings.Contains(m, msg) || stalled["reason"] != "RetriesExceeded" {
			return false, fmt.Errorf("stalled, but not as expected (%q): %s", msg, fluxState(hr))
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hr
}

// waitVerdict waits for helm-controller's verdict on the current
// generation, whichever it is: Ready=True, or Stalled=True.
func (d *fluxDeployer) waitVerdict(ctx context.Context, t *testing.T) *unstructured.Unstructured {
	t.Helper()
	hr, err := d.flux.WaitHelmRelease(ctx, fluxNS, d.s.release, func(hr *unstructured.Unstructured) (bool, error) {
		observed, _, _ := unstructured.NestedInt64(hr.Object, "status", "observedGeneration")
		ready, stalled := testbed.StatusCondition(hr, "Ready"), testbed.StatusCondition(hr, "Stalled")
		done := observed == hr.GetGeneration() && ((ready != nil && ready["status"] == "True") || (stalled != nil && stalled["status"] == "True"))
		return done, fmt.Errorf("no verdict yet: %s", fluxState(hr))
	})
	if err != nil {
		t.Fatal(err)
	}
	return hr
}

// retry follows docs/deployers.md: force a reconcile, approve the reboots,
// wait for the release deployed and the fleet on version.
func (d *fluxDeployer) retry(ctx context.Context, t *testing.T, s *stack, version string) {
	t.Helper()
	kubectl(ctx, t, fluxForce)
	stop := s.approveEach(ctx)
	d.waitDeployed(ctx, t)
	stop()
	s.waitFleet(ctx, version)
}

// waitDeployed waits for Ready=True on the current generation with the
// latest Helm revision deployed.
func (d *fluxDeployer) waitDeployed(ctx context.Context, t *testing.T) {
	t.Helper()
	if _, err := d.flux.WaitHelmRelease(ctx, fluxNS, d.s.release, func(hr *unstructured.Unstructured) (bool, error) {
		if ok, err := testbed.HelmReleaseReady(hr); !ok {
			return false, err
		}
		if h := fluxLatest(hr); h["status"] != "deployed" {
			return false, fmt.Errorf("history[0] %v", h)
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// fluxState is what `kubectl get helmrelease` and `flux get` show: the
// Ready, Stalled and Released conditions and the latest Helm revision.
func fluxState(hr *unstructured.Unstructured) string {
	var parts []string
	for _, typ := range []string{"Ready", "Stalled", "Released"} {
		if c := testbed.StatusCondition(hr, typ); c != nil {
			parts = append(parts, fmt.Sprintf("%s=%v %v: %v", typ, c["status"], c["reason"], c["message"]))
		}
	}
	if h := fluxLatest(hr); h != nil {
		parts = append(parts, fmt.Sprintf("history[0] v%v %v", h["version"], h["status"]))
	}
	return strings.Join(parts, "; ")
}

// waitFleet waits until every node of the stack runs version with no
// state label left.
func (s *stack) waitFleet(ctx context.Context, version string) {
	s.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes := s.listNodes(ctx)
		if len(nodes) != len(s.nodes) {
			return false, nil
		}
		for _, n := range nodes {
			st, ok := n.Labels[keys.UpgradeState()]
			if v := n.Labels[keys.DriverVersion()]; v != version || ok {
				last = fmt.Sprintf("%s: driver %s, state %q", n.Name, v, st)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		s.t.Fatalf("the fleet never came home to %s: %v (last: %s)", version, err, last)
	}
}
