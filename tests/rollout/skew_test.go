package rollout_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// The rollout's reboot timeout is measured on its own clock from when it
// saw the reboot start, whatever the NPU node's clock says: with a node's
// clock ten minutes behind (its reboot-started-at older than the rollout's
// own since) the reboot must still count as started, and with one ten
// minutes ahead the timeout must not be stretched by the skew. Both nodes
// never come back from their reboot; both fail at step reboot one timeout
// after their reboot was seen to start, as with agreeing clocks.
func TestRebootTimeoutIgnoresTheNodesClock(t *testing.T) {
	t.Parallel()
	const timeout = 60 * time.Second
	f := newFleet(t, 2, func(p, _ map[string]any) {
		p["maxParallelUpgrades"] = 2
		p["maxUnavailable"] = "100%"
		p["maxFailures"] = 2
		p["rebootTimeoutSeconds"] = int(timeout / time.Second)
	})
	ctx := ctxTimeout(t, 6*time.Minute)
	skews := map[string]time.Duration{f.nodes[0].Name(): -10 * time.Minute, f.nodes[1].Name(): 10 * time.Minute}
	for _, n := range f.nodes {
		if err := n.Host().SetClockOffset(skews[n.Name()]); err != nil {
			t.Fatal(err)
		}
		n.LoseOnReboot()
	}
	r := f.startRollout(f.upgrade(ctx, newVersion))

	// On the test's clock: when each node's reboot was recorded, and when
	// the rollout failed it.
	started, failed := map[string]time.Time{}, map[string]time.Time{}
	err := testbed.WaitFor(ctx, testbed.NodesLW(env.Client, f.selector()), &corev1.Node{}, func(nodes []*corev1.Node) (bool, error) {
		now := time.Now()
		for _, n := range nodes {
			if _, ok := started[n.Name]; !ok && n.Annotations[keys.RebootFromBootID()] != "" {
				started[n.Name] = now
			}
			if _, ok := failed[n.Name]; !ok && n.Labels[keys.UpgradeState()] == string(contract.StateFailed) {
				failed[n.Name] = now
			}
		}
		return len(failed) == len(f.nodes), nil
	})
	if err != nil {
		t.Fatalf("the lost nodes were not failed (reboots seen %v, failed %v): %v\n%s", started, failed, err, tail(r.output(), 20))
	}
	for _, n := range f.nodes {
		name := n.Name()
		node := getNode(t, name)
		step, reason := node.Annotations[keys.UpgradeFailureStep()], node.Annotations[keys.UpgradeFailureReason()]
		if step != "reboot" || !strings.Contains(reason, "did not come back within 1m0s") {
			t.Errorf("%s (clock %s): failed at %q: %q; want step reboot, the timeout", name, skews[name], step, reason)
		}
		if started[name].IsZero() {
			t.Errorf("%s: never saw its reboot start", name)
			continue
		}
		took := failed[name].Sub(started[name])
		t.Logf("%s (clock %s): failed %s after its reboot started", name, skews[name], took.Round(time.Second))
		// The rollout sees the start a little after this watch may.
		if took < timeout-2*time.Second || took > timeout+30*time.Second {
			t.Errorf("%s (clock %s): failed %s after its reboot started, want the timeout %s", name, skews[name], took.Round(time.Second), timeout)
		}
	}
}
