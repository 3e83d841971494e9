package fleet

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// The simulator's writes cross the Kubernetes API, so its tests run
// against the test bed's real control plane.
var env *testbed.Env

func TestMain(m *testing.M) { os.Exit(testbed.Main(m, &env)) }

var testKeys = contract.Keys{Domain: contract.DefaultDomain}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newNamespace is a fresh namespace of the test bed, deleted after the
// test.
func newNamespace(ctx context.Context, t *testing.T) string {
	t.Helper()
	ns, err := env.NewNamespace(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	return ns
}

// newNode creates a plain Node with a unique name, deleted after the test.
// It has no testbed.KWOKAnnotation: KWOK neither manages it nor plays the
// stages of its pods, so every change of its pods is the simulator's or
// the test's.
func newNode(ctx context.Context, t *testing.T, labels, annotations map[string]string) *corev1.Node {
	t.Helper()
	n, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "fleet-test-", Labels: labels, Annotations: annotations,
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
	})
	if _, kwok := n.Annotations[testbed.KWOKAnnotation]; kwok {
		t.Fatalf("node %s is managed by KWOK", n.Name)
	}
	return n
}

// newSim is a simulator on the test bed playing the chart namespace ns,
// its workers not started: the test runs its agents' passes by hand.
func newSim(t *testing.T, ns string, clk *clocktesting.FakeClock) *Sim {
	t.Helper()
	sel, err := labels.Parse("app=npu-driver-daemonset")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Client: env.Client, Keys: testKeys, NodeSelector: labels.Everything(), Namespace: ns, DriverSelector: sel,
		Machine: simhost.Spec{Chip: "910b", ChipCount: 8}, Clock: clk, Log: logrus.New()})
	t.Cleanup(s.queue.ShutDown)
	return s
}

// startInformers runs the simulator's own informers (what Run starts,
// without the workers and heartbeats) until the test ends.
func startInformers(ctx context.Context, t *testing.T, s *Sim) {
	t.Helper()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	for _, start := range s.start {
		start(stop)
	}
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		t.Fatal("the simulator's informers did not sync")
	}
}

// catchUp waits until the simulator's pod cache holds p at the
// resourceVersion the API server gave it, as the informer's echo of a
// write would bring the node back to the simulator.
func catchUp(ctx context.Context, t *testing.T, s *Sim, p *corev1.Pod) {
	t.Helper()
	var seen string
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		obj, ok, err := s.pods.GetByKey(p.Namespace + "/" + p.Name)
		if err != nil || !ok {
			return false, err
		}
		seen = obj.(*corev1.Pod).ResourceVersion
		return seen == p.ResourceVersion, nil
	})
	if err != nil {
		t.Fatalf("pod %s: the simulator's cache has resourceVersion %q, the API server %q: %v", p.Name, seen, p.ResourceVersion, err)
	}
}
