package fleet

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/tests/bench/memhost"
)

// A node whose chips never probe healthy: after the failure threshold of
// probes ProbeEvery apart, its health-watch reports the wedge and asks
// for a recovery reboot, which then waits for an approval (recovery is
// not automatic): the machine is never rebooted.
func TestWedgedNodeAsksForRecoveryAndWaits(t *testing.T) {
	ctx := testCtx(t)
	ns := newNamespace(ctx, t)
	k := testKeys
	node := newNode(ctx, t, map[string]string{k.DriverVersion(): "1", k.DriverReady(): contract.True, WedgedLabel: contract.True}, nil)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	s := newSim(t, ns, clk)
	startInformers(ctx, t, s)
	catchUpNode(ctx, t, s, node)
	m := s.machine(node.Name, true)
	if m.host.State().Wedged == nil {
		t.Fatal("the machine of a node labelled wedged has no wedged chips")
	}
	m.host = memhost.New(simhost.Spec{Chip: "910b", ChipCount: 8, Driver: "1"}, clk)
	m.host.WedgeForever()
	clk.Step(time.Hour) // past the uptime guard

	n := node
	for probe := 1; probe <= healthPolicy.FailureThreshold+1; probe++ {
		after, err := s.sync(ctx, node.Name)
		if err != nil || after != DefaultProbeEvery {
			t.Fatalf("probe %d: look again after %s, err %v; want after %s (the next probe)", probe, after, err, DefaultProbeEvery)
		}
		if n, err = env.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		catchUpNode(ctx, t, s, n)
		clk.Step(DefaultProbeEvery)
	}
	if n.Labels[k.RebootRequired()] != contract.True || n.Annotations[k.RebootReason()] != string(contract.ReasonRecovery) || n.Labels[k.DriverReady()] != contract.False {
		t.Fatalf("after %d failed probes: labels %v, annotations %v; want a recovery reboot asked for and driver-ready=false",
			healthPolicy.FailureThreshold+1, n.Labels, n.Annotations)
	}
	if m.host.RebootPending() || m.host.State().Reboots != 0 {
		t.Fatal("the wedged node was rebooted without an approval")
	}
	if n.Annotations[k.RebootFromBootID()] != "" {
		t.Fatalf("the rebooter recorded a reboot without an approval: %v", n.Annotations)
	}
}
