package health_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// A chip that flaps (fails, passes once, fails again) stays wedged: one good
// probe no longer withdraws the recovery request, only recoveryThreshold
// passes in a row do, and the wedge that ended without a reboot is written
// to the loop guard's history.
func TestFlappingChipStaysWedgedUntilItPassesInARow(t *testing.T) {
	f := newFleet(t, fleetOptions{nodes: 1, probeInterval: 2, threshold: 2, recoveryThreshold: 3})
	node := f.nodes[0]
	ctx := ctxTimeout(t, 3*time.Minute)
	waitNode(ctx, t, node.Name(), "driver ready", healthy(desiredVersion))

	if err := node.Host().Wedge(0); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, node.Name(), "wedge reported", wedged)
	heal(t, node)
	eventually(ctx, t, "one passing probe while wedged", func() bool {
		return strings.Contains(f.logs(node, "watch"), "passed while wedged")
	})
	failedBefore := strings.Count(f.logs(node, "watch"), "chip probe failed")
	if err := node.Host().Wedge(0); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "failing again", func() bool {
		return strings.Count(f.logs(node, "watch"), "chip probe failed") > failedBefore
	})
	n, err := env.Client.CoreV1().Nodes().Get(ctx, node.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !wedged(n) || countEvents(t, node.Name(), contract.EventChipRecovered) != 0 {
		t.Fatalf("one passing probe undid the wedge: labels %v annotations %v", n.Labels, n.Annotations)
	}

	heal(t, node)
	n = waitNode(ctx, t, node.Name(), "recovered after 3 passes in a row", healthy(desiredVersion))
	waitEvent(ctx, t, node.Name(), contract.EventChipRecovered, "3 consecutive passing probes")
	if h := n.Annotations[keys.RebootHistory()]; !strings.Contains(h, ";wedge;failed") {
		t.Fatalf("reboot history %q: want the withdrawn wedge counted", h)
	}
}

// A node whose chips keep wedging and recovering without a reboot ends up
// held by the loop guard: each withdrawn wedge counts, and once
// rebooter.rebootBudget.maxReboots of them fell within the window the next
// recovery request is refused (RebootRefused, with the reset command)
// instead of starting another cordon and eviction.
func TestRepeatedWedgesWithoutRebootStopAtTheLoopGuard(t *testing.T) {
	const maxReboots = 2
	f := newFleet(t, fleetOptions{nodes: 1, probeInterval: 1, threshold: 2, recoveryThreshold: 2,
		// The uptime guard holds every reboot back, so the wedges end
		// without one, as when a flapping chip passes again before its
		// reboot.
		rebooter: map[string]any{"uptimeGuardMinutes": 60, "metricsPort": 0, "slots": 1,
			"rebootBudget": map[string]any{"maxReboots": maxReboots, "windowMinutes": 60}},
		recovery: map[string]any{"autoRecover": true, "maxWedgedNodes": "100%"},
	})
	node := f.nodes[0]
	ctx := ctxTimeout(t, 4*time.Minute)
	waitNode(ctx, t, node.Name(), "driver ready", healthy(desiredVersion))
	for i := 0; i < maxReboots; i++ {
		if err := node.Host().Wedge(0); err != nil {
			t.Fatal(err)
		}
		waitNode(ctx, t, node.Name(), "wedge reported", wedged)
		heal(t, node)
		n := waitNode(ctx, t, node.Name(), "recovered", healthy(desiredVersion))
		if c := strings.Count(n.Annotations[keys.RebootHistory()], ";wedge;failed"); c != i+1 {
			t.Fatalf("after wedge %d the history counts %d withdrawn wedges: %q", i+1, c, n.Annotations[keys.RebootHistory()])
		}
	}
	if err := node.Host().Wedge(0); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, node.Name(), "wedge reported", wedged)
	waitEvent(ctx, t, node.Name(), contract.EventRebootRefused, "ended without a reboot")
	waitEvent(ctx, t, node.Name(), contract.EventRebootRefused, "kubectl annotate node "+node.Name()+" "+keys.RebootHistory()+"-")
	n, err := env.Client.CoreV1().Nodes().Get(context.Background(), node.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable || n.Annotations[keys.RecoveryCordoned()] != "" {
		t.Fatalf("a node held by the loop guard must not be cordoned for recovery: unschedulable %t, annotations %v", n.Spec.Unschedulable, n.Annotations)
	}
}
