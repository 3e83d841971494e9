package health_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestRuntimeWithoutNRIIsReportedOnTheNode installs the chart (cdi.inject
// is the default) on a node whose runtime offers no NRI: the injector
// says so on the Node (a Warning NRIUnavailable event naming the socket,
// the injection-status annotation) and the device plugin does not start,
// so no chip is advertised. Once the runtime offers NRI the injector
// registers without a restart, the annotation goes and the device plugin
// starts.
func TestRuntimeWithoutNRIIsReportedOnTheNode(t *testing.T) {
	ctx := ctxTimeout(t, 5*time.Minute)
	f := newFleet(t, fleetOptions{nodes: 1, loaded: desiredVersion, probeInterval: 1, threshold: 3, devicePlugin: true, noNRI: true})
	node := f.nodes[0]
	waitEvent(ctx, t, node.Name(), contract.EventNRIUnavailable, "NRI socket /run/nri/nri.sock")
	waitNode(ctx, t, node.Name(), "injection-status unavailable", func(n *corev1.Node) bool {
		return strings.HasPrefix(n.Annotations[keys.InjectionStatus()], "unavailable: node "+node.Name()+": NRI socket")
	})
	// The device plugin's gate waits for the injector: still in its init
	// container once the Node says why.
	pods, err := env.Client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{LabelSelector: pluginSelector, FieldSelector: "spec.nodeName=" + node.Name()})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("device plugin pods: %v, %d", err, len(pods.Items))
	}
	if p := pods.Items[0]; p.Status.Phase != corev1.PodPending || !initRunning(&p, "wait-for-driver") {
		t.Fatalf("device plugin pod %s: phase %s, init %+v; want waiting in wait-for-driver for the injector", p.Name, p.Status.Phase, p.Status.InitContainerStatuses)
	}

	if err := node.StartNRI(); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, node.Name(), "injection-status removed", func(n *corev1.Node) bool {
		_, ok := n.Annotations[keys.InjectionStatus()]
		return !ok
	})
	err = testbed.WaitFor(ctx, testbed.PodsLW(env.Client, f.ns, pluginSelector), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if p.Spec.NodeName == node.Name() && p.Status.Phase == corev1.PodRunning {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("device plugin after NRI appeared: %v", err)
	}
}

func initRunning(p *corev1.Pod, name string) bool {
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == name {
			return s.State.Running != nil
		}
	}
	return false
}
