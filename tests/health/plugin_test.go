package health_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// With autoRecover off nothing reboots a wedged node soon, so the wedge
// must reach the scheduler: the health-watch deletes the node's
// device-plugin pod, whose replacement waits in wait-for-driver while the
// marker is absent (no plugin registers, the kubelet withdraws the NPU
// resources). Once the chips recover and the marker is back, the
// replacement starts; nothing is deleted twice. The deletion passes the
// node-agent policy and the driver pod's RBAC of the real chart.
func TestWedgeWithdrawsTheDevicePlugin(t *testing.T) {
	const interval, threshold = 1, 2
	f := newFleet(t, fleetOptions{nodes: 1, probeInterval: interval, threshold: threshold, devicePlugin: true, recoveryThreshold: 1})
	node := f.nodes[0]
	ctx := ctxTimeout(t, 4*time.Minute)
	// The chart names the device plugin's selector labels to the watch.
	f.driverPod(ctx, node, "running with --device-plugin-selector", func(p *corev1.Pod) bool {
		return podReady(p) && slices.ContainsFunc(containerArgs(p, "watch"), func(a string) bool {
			return strings.HasPrefix(a, "--device-plugin-selector=") && strings.Contains(a, pluginSelector)
		})
	})
	waitNode(ctx, t, node.Name(), "driver ready", healthy(desiredVersion))
	serving := f.pluginPod(ctx, node, "serving", initialized)

	if err := node.Host().Wedge(1); err != nil {
		t.Fatal(err)
	}
	waitNode(ctx, t, node.Name(), "wedge reported", wedged)
	waitEvent(ctx, t, node.Name(), contract.EventDevicePluginWithdrawn, serving.Name)
	f.pluginPod(ctx, node, "replacement waiting for the driver", func(p *corev1.Pod) bool {
		return p.UID != serving.UID && !initialized(p)
	})

	heal(t, node)
	waitNode(ctx, t, node.Name(), "recovered", healthy(desiredVersion))
	f.pluginPod(ctx, node, "replacement serving after the recovery", func(p *corev1.Pod) bool {
		return p.UID != serving.UID && initialized(p)
	})
	if c := countEvents(t, node.Name(), contract.EventDevicePluginWithdrawn); c != 1 {
		t.Fatalf("%d DevicePluginWithdrawn events, want 1", c)
	}
}

func containerArgs(p *corev1.Pod, name string) []string {
	for _, c := range p.Spec.Containers {
		if c.Name == name {
			return c.Args
		}
	}
	return nil
}

func initialized(p *corev1.Pod) bool { return podCondition(p, corev1.PodInitialized) }

// pluginPod waits until the node has a device-plugin pod, not being
// deleted, that satisfies cond, and returns it.
func (f *fleet) pluginPod(ctx context.Context, node interface{ Name() string }, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	f.t.Helper()
	var found *corev1.Pod
	lw := cache.NewFilteredListWatchFromClient(env.Client.CoreV1().RESTClient(), "pods", f.ns, func(o *metav1.ListOptions) {
		o.LabelSelector = pluginSelector
		o.FieldSelector = "spec.nodeName=" + node.Name()
	})
	err := testbed.WaitFor(ctx, lw, &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
		for _, p := range pods {
			if p.DeletionTimestamp == nil && cond(p) {
				found = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		f.t.Fatalf("device-plugin pod on %s: %s: %v", node.Name(), what, err)
	}
	return found
}
