package health_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

// npu-smi that cannot load its libraries (the loader's message, exit 127)
// is a host problem: the watch reports it once with an NPUHostProblem
// warning naming the node and the library, sets driver-ready=false, and
// however many probes pass the failure threshold it never removes the
// marker, records a wedge or asks for a reboot. Once npu-smi runs again
// the node is ready.
func TestNPUSMIUnableToLoadItsLibrariesIsAHostProblemNotAWedge(t *testing.T) {
	const interval, threshold = 1, 2
	f := newFleet(t, fleetOptions{nodes: 1, probeInterval: interval, threshold: threshold})
	node := f.nodes[0]
	ctx := ctxTimeout(t, 3*time.Minute)
	waitNode(ctx, t, node.Name(), "driver ready", healthy(desiredVersion))

	loader := "npu-smi: error while loading shared libraries: libdrvdsmi_host.so: cannot open shared object file: No such file or directory\n"
	if err := node.Host().SetSMI(simhost.SMIRaw, loader, 127); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Host().SetSMI(simhost.SMINormal, "", 0) })
	waitEvent(ctx, t, node.Name(), contract.EventNPUHostProblem, "node "+node.Name())
	waitNode(ctx, t, node.Name(), "driver-ready=false", func(n *corev1.Node) bool { return n.Labels[keys.DriverReady()] == contract.False })
	// Probes well past the threshold, counted in the watch's log (one
	// warning per probe).
	eventually(ctx, t, "probes past the failure threshold", func() bool {
		return strings.Count(f.logs(node, "watch"), "host problem: npu-smi cannot run") >= 3*threshold
	})
	n := waitNode(ctx, t, node.Name(), "node read", func(*corev1.Node) bool { return true })
	if _, req := n.Labels[keys.RebootRequired()]; req || n.Annotations[keys.RebootReason()] != "" {
		t.Fatalf("host problem asked for a reboot: labels %v annotations %v", n.Labels, n.Annotations)
	}
	if _, ok, _ := markers(node).Ready(); !ok {
		t.Fatal("host problem removed the driver-ready marker")
	}
	if w, _ := markers(node).Wedged(); w {
		t.Fatal("host problem recorded as a wedge")
	}
	for _, reason := range []contract.EventReason{contract.EventChipWedged, contract.EventRebootRequired} {
		if c := countEvents(t, node.Name(), reason); c != 0 {
			t.Fatalf("%d %s events for a host problem", c, reason)
		}
	}
	if c := countEvents(t, node.Name(), contract.EventNPUHostProblem); c != 1 {
		t.Fatalf("%d NPUHostProblem events, want 1 for one lasting problem", c)
	}

	if err := node.Host().SetSMI(simhost.SMINormal, "", 0); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, node.Name(), "ready again once npu-smi runs", healthy(desiredVersion))
}
