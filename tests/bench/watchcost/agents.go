package watchcost

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/reboot"
	"github.com/openfuyao/npu-stack/tests/bench/memhost"
)

// Variant is which storm-protection watch the agents run.
type Variant string

const (
	// Requests is the rebooter as it is: --auto-recover, its storm
	// protection watching the NPU nodes with reboot-required=true.
	Requests Variant = "reboot requests"
	// AllNodes is the rebooter's watch set before that change: its node
	// and slot watches as now (the agent without --auto-recover), plus a
	// metadata watch of every NPU node, the list-watch the storm protection
	// ran then (selector npu.present=true, nothing else).
	AllNodes Variant = "all NPU nodes"
)

// ParseVariant reads a Variant from its flag name.
func ParseVariant(s string) (Variant, error) {
	switch s {
	case "requests":
		return Requests, nil
	case "all-nodes":
		return AllNodes, nil
	}
	return "", fmt.Errorf("watch variant %q: want requests (the rebooter as it is) or all-nodes (the storm protection's watch of every NPU node it had before)", s)
}

// agents are N rebooters of one variant running in this process.
type agents struct {
	variant Variant
	stop    context.CancelFunc
	done    sync.WaitGroup
	errs    chan error
	mu      sync.Mutex
	real    []*reboot.Agent
	// oldEvents counts what AllNodes' watches of every NPU node deliver.
	oldEvents atomic.Int64
}

// startAgents starts one rebooter per node, each with its own client and
// connection as on its own node, at most startParallel at once.
func startAgents(ctx context.Context, base *rest.Config, nodes []string, v Variant, log logrus.FieldLogger) (*agents, error) {
	runCtx, stop := context.WithCancel(context.Background())
	a := &agents{variant: v, stop: stop, errs: make(chan error, len(nodes))}
	sem := make(chan struct{}, startParallel)
	for _, node := range nodes {
		select {
		case <-ctx.Done():
			a.close()
			return nil, ctx.Err()
		case sem <- struct{}{}:
		}
		if err := a.start(runCtx, base, node, log); err != nil {
			a.close()
			return nil, err
		}
		<-sem
	}
	return a, nil
}

// startParallel bounds the agents being set up at once.
const startParallel = 64

func (a *agents) start(ctx context.Context, base *rest.Config, node string, log logrus.FieldLogger) error {
	rc := rest.CopyConfig(base)
	// The chart's client settings for the rebooter (--kube-api-qps 5,
	// --kube-api-burst 10) and, as kube.ClientOptions.Client does,
	// protobuf for built-in types.
	rc.QPS, rc.Burst = 5, 10
	// A dialer of its own keeps client-go from sharing one cached
	// transport among the agents: each has its own connection, as on N
	// nodes.
	rc.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return fmt.Errorf("HTTP client of the agent of %s: %w", node, err)
	}
	pb := rest.CopyConfig(rc)
	pb.ContentType = runtime.ContentTypeProtobuf
	pb.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := kubernetes.NewForConfigAndClient(pb, hc)
	if err != nil {
		return fmt.Errorf("client of the agent of %s: %w", node, err)
	}
	md, err := metadata.NewForConfigAndClient(rc, hc)
	if err != nil {
		return fmt.Errorf("metadata client of the agent of %s: %w", node, err)
	}
	npu := labels.SelectorFromSet(labels.Set{contract.LabelNPUPresent: contract.True})
	cfg := reboot.Config{
		NodeName:  node,
		Namespace: namespace,
		Policy: reboot.Policy{
			Keys:        keys,
			AutoUpgrade: true,
			// AllNodes runs its old watch beside the agent instead.
			AutoRecover:    a.variant == Requests,
			MaxWedgedNodes: intstr.FromString("10%"),
		},
		Method:          host.RebootSystemd,
		NPUNodeSelector: npu,
		Slots:           1,
		SlotTTL:         time.Hour,
		Client:          client,
		Metadata:        md,
		Host:            memhost.New(simhost.Spec{Chip: "910b", ChipCount: 8, Driver: "1.0.0"}, clock.RealClock{}),
		Clock:           clock.RealClock{},
		Recorder:        nopRecorder{},
		Log:             log,
	}
	agent, err := reboot.New(cfg)
	if err != nil {
		return fmt.Errorf("rebooter of %s: %w", node, err)
	}
	a.mu.Lock()
	a.real = append(a.real, agent)
	a.mu.Unlock()
	a.done.Go(func() {
		if err := agent.Run(ctx); err != nil && ctx.Err() == nil {
			a.errs <- fmt.Errorf("rebooter of %s: %w", node, err)
		}
	})
	if a.variant == AllNodes {
		inf := allNodesInformer(md, npu)
		// Slimmed as the old agent did (and the agent does now): what the
		// process keeps is not what is measured, and 1,000 agents holding
		// 1,000 full metadata objects each would not fit this machine.
		if err := inf.SetTransform(slim); err != nil {
			return fmt.Errorf("watch of every NPU node for %s: %w", node, err)
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { a.oldEvents.Add(1) },
			UpdateFunc: func(any, any) { a.oldEvents.Add(1) },
			DeleteFunc: func(any) { a.oldEvents.Add(1) },
		}); err != nil {
			return fmt.Errorf("watch of every NPU node for %s: %w", node, err)
		}
		a.done.Go(func() { inf.RunWithContext(ctx) })
	}
	return nil
}

// allNodesInformer is the storm protection's watch before it selected
// the reboot requests: the metadata of every NPU node.
func allNodesInformer(md metadata.Interface, npu labels.Selector) cache.SharedIndexInformer {
	nodes := md.Resource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"})
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = npu.String()
			return nodes.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = npu.String()
			return nodes.Watch(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(lw, &metav1.PartialObjectMetadata{}, 5*time.Minute, cache.Indexers{})
}

// slim keeps what the storm protection reads of a node: its name, UID,
// resourceVersion, reboot-required label and reboot-reason annotation.
func slim(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil // a tombstone: left as it is
	}
	out := &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion}}
	if v, ok := m.Labels[keys.RebootRequired()]; ok {
		out.Labels = map[string]string{keys.RebootRequired(): v}
	}
	if v, ok := m.Annotations[keys.RebootReason()]; ok {
		out.Annotations = map[string]string{keys.RebootReason(): v}
	}
	return out, nil
}

// stormEvents is what the agents' storm-protection watches delivered so
// far, summed over the agents.
func (a *agents) stormEvents() (int64, error) {
	if a.variant == AllNodes {
		return a.oldEvents.Load(), nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var total int64
	for _, ag := range a.real {
		v, err := fleetWatchEvents(ag.Metrics().Registry)
		if err != nil {
			return 0, err
		}
		total += v
	}
	return total, nil
}

// failed returns the first agent that stopped with an error, if any.
func (a *agents) failed() error {
	select {
	case err := <-a.errs:
		return err
	default:
		return nil
	}
}

// close stops every agent and waits for them.
func (a *agents) close() {
	a.stop()
	a.done.Wait()
}

type nopRecorder struct{}

func (nopRecorder) Node(*corev1.Node, bool, contract.EventReason, string, ...any) {}
