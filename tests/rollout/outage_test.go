package rollout_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestRolloutSurvivesAPIServerOutage stops kube-apiserver for 30 s in the
// middle of a 12-node rollout and starts it again on the same port with
// the same etcd: the rollout, the rebooters and the health-watches
// reconnect and finish; no node reboots twice, nothing is lost.
func TestRolloutSurvivesAPIServerOutage(t *testing.T) {
	outage(t, "kube-apiserver", 30*time.Second)
}

// TestRolloutSurvivesEtcdRestart restarts etcd (same data) in the middle
// of a 12-node rollout.
func TestRolloutSurvivesEtcdRestart(t *testing.T) {
	outage(t, "etcd", 5*time.Second)
}

func outage(t *testing.T, component string, down time.Duration) {
	f := newFleet(t, 12, func(p, _ map[string]any) {
		p["maxParallelUpgrades"] = 3
		p["maxUnavailable"] = "25%"
		p["rebootTimeoutSeconds"] = 300
	})
	ctx := ctxTimeout(t, 15*time.Minute)
	pre := f.nodes[7].Name()
	if _, err := env.Client.CoreV1().Nodes().Patch(ctx, pre, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	inv := f.watchCordons()
	args := f.upgrade(ctx, newVersion)
	r := f.startRollout(args)
	// In the middle: some nodes done, others in flight.
	if err := waitFleet(ctx, f, "3 nodes on the new driver", func(ns []*corev1.Node) bool {
		done := 0
		for _, n := range ns {
			if n.Labels[keys.DriverVersion()] == newVersion {
				done++
			}
		}
		return done >= 3
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopping %s for %s", component, down)
	if err := env.StopComponent(component); err != nil {
		t.Fatal(err)
	}
	// The outage's length is the fault injected, not a wait for anything.
	select {
	case <-time.After(down):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if err := env.StartComponent(ctx, component); err != nil {
		t.Fatalf("restart %s: %v", component, err)
	}
	t.Logf("%s is back", component)
	if code := r.wait(ctx, t); code != 0 {
		t.Fatalf("rollout exit %d after the %s outage:\n%s", code, component, tail(r.output(), 40))
	}
	if !strings.Contains(r.output(), "rollout finished: 12/12 nodes up to date") {
		t.Errorf("rollout must finish every node:\n%s", tail(r.output(), 10))
	}
	f.checkDone(ctx, pre)
	if max, worst := inv.max(); max > 3 {
		t.Errorf("up to %d nodes were cordoned at once (%v); maxUnavailable 25%% of 12 allows 3", max, worst)
	}
}

// waitFleet waits until cond holds for the fleet's nodes.
func waitFleet(ctx context.Context, f *fleet, what string, cond func([]*corev1.Node) bool) error {
	err := testbed.WaitFor(ctx, testbed.NodesLW(env.Client, f.selector()), &corev1.Node{}, func(ns []*corev1.Node) (bool, error) {
		return cond(ns), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}
