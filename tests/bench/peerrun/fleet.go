package peerrun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/tests/bench/fleet"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// GPU Operator's names for what the peer manages; the peer's defaults
// select them.
const (
	driverApp    = "nvidia-driver-daemonset"
	validatorApp = "nvidia-operator-validator"
	// VersionAnnotation on the driver pod template names the driver
	// version its pods load.
	VersionAnnotation = "bench.openfuyao.com/driver-version"
	digestEnv         = "DRIVER_CONFIG_DIGEST"
)

// FleetConfig installs the peer's DaemonSets on a fleet.
type FleetConfig struct {
	// Client is the benchmark's own client: what it writes is the
	// user's and the nodes' doing, not the peer's, and is not counted.
	Client kubernetes.Interface
	// Namespace is the peer's (GPU Operator's operator namespace).
	Namespace string
	// NodeSelector selects the accelerator nodes, Nodes how many.
	NodeSelector labels.Selector
	Nodes        int
	// HeartbeatEvery, if set, makes the fleet renew its nodes' Leases
	// itself, as kubelets do: the peer's nodes are a fleet apart from
	// npu-stack's, whose simulator renews only the NPU nodes'.
	HeartbeatEvery time.Duration
	Log            logrus.FieldLogger
}

// Fleet is the peer's DaemonSets on every node, and the simulated node
// side of a driver restart.
type Fleet struct {
	cfg  FleetConfig
	sim  *nodeSim
	beat *fleet.Heartbeat
	stop context.CancelFunc
}

// Install creates the namespace, the driver DaemonSet (OnDelete, as GPU
// Operator's driver DaemonSet is: the library restarts each pod) at
// version and the validator DaemonSet, starts the node simulation and
// waits until both have a Ready pod on every node.
func Install(ctx context.Context, cfg FleetConfig, version string) (*Fleet, error) {
	c := cfg.Client
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cfg.Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", cfg.Namespace, err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	f := &Fleet{cfg: cfg, stop: stop}
	var err error
	if f.sim, err = startNodeSim(runCtx, c, cfg.Namespace, cfg.Log); err != nil {
		stop()
		return nil, err
	}
	if cfg.HeartbeatEvery > 0 {
		if err := f.startHeartbeat(runCtx); err != nil {
			stop()
			return nil, err
		}
	}
	for _, ds := range []*appsv1.DaemonSet{f.daemonSet(driverApp, version), f.daemonSet(validatorApp, "")} {
		if _, err := c.AppsV1().DaemonSets(cfg.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			f.Close()
			return nil, fmt.Errorf("create DaemonSet %s/%s: %w", cfg.Namespace, ds.Name, err)
		}
	}
	if err := f.waitReady(ctx); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// startHeartbeat renews the Leases of the fleet's nodes.
func (f *Fleet) startHeartbeat(ctx context.Context) error {
	nf := informers.NewSharedInformerFactoryWithOptions(f.cfg.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = f.cfg.NodeSelector.String()
	}))
	ni := nf.Core().V1().Nodes()
	lister := ni.Lister()
	_ = ni.Informer()
	nf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), ni.Informer().HasSynced) {
		return fmt.Errorf("peer fleet heartbeat: node informer did not sync: %w", ctx.Err())
	}
	f.beat = fleet.NewHeartbeat(fleet.HeartbeatConfig{Client: f.cfg.Client, Every: f.cfg.HeartbeatEvery, Clock: clock.RealClock{}, Log: f.cfg.Log,
		Nodes: func() []*corev1.Node { ns, _ := lister.List(labels.Everything()); return ns }})
	go f.beat.Run(ctx)
	return nil
}

// HeartbeatMaxLag is the latest the fleet renewed a bucket of its node
// Leases (0 when the fleet does not renew them).
func (f *Fleet) HeartbeatMaxLag() time.Duration {
	if f.beat == nil {
		return 0
	}
	return f.beat.MaxLag()
}

// Close stops the node simulation.
func (f *Fleet) Close() { f.stop() }

// SetLoadTime sets the driver load time of the restarts that start next:
// the simulated node's per-node time.
func (f *Fleet) SetLoadTime(d time.Duration) { f.sim.setLoadTime(d) }

// SimWrites are the simulated nodes' pod status writes so far.
func (f *Fleet) SimWrites() int { return f.sim.Writes() }

// Bump changes the driver DaemonSet's template to version, as GPU
// Operator's ClusterPolicy controller does on a new driver version: a new
// image, version and config digest.
func (f *Fleet) Bump(ctx context.Context, version string) error {
	dss := f.cfg.Client.AppsV1().DaemonSets(f.cfg.Namespace)
	ds, err := dss.Get(ctx, driverApp, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get the peer's driver DaemonSet: %w", err)
	}
	ds.Spec.Template = f.daemonSet(driverApp, version).Spec.Template
	if _, err := dss.Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update the peer's driver DaemonSet to %s: %w", version, err)
	}
	return nil
}

// daemonSet is the driver (version set) or validator DaemonSet.
func (f *Fleet) daemonSet(app, version string) *appsv1.DaemonSet {
	sel := map[string]string{"app": app}
	nodeSel, _ := labels.ConvertSelectorToLabelsMap(f.cfg.NodeSelector.String())
	tpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: sel},
		Spec: corev1.PodSpec{
			NodeSelector: nodeSel,
			// As GPU Operator's operands: every taint tolerated.
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: app, Image: "registry.invalid/peer/" + app + ":1"}},
		},
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: f.cfg.Namespace, Labels: sel},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: tpl,
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}},
	}
	if version != "" {
		sum := sha256.Sum256([]byte(version))
		tpl.Annotations = map[string]string{VersionAnnotation: version}
		tpl.Spec.Containers[0].Image = "registry.invalid/peer/driver:" + version
		tpl.Spec.Containers[0].Env = []corev1.EnvVar{{Name: digestEnv, Value: hex.EncodeToString(sum[:8])}}
		ds.Spec.Template = tpl
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	}
	return ds
}

// waitReady waits for a Ready pod of both DaemonSets on every node.
func (f *Fleet) waitReady(ctx context.Context) error {
	var last string
	err := testbed.WaitFor(ctx, cache.NewListWatchFromClient(f.cfg.Client.AppsV1().RESTClient(), "daemonsets", f.cfg.Namespace, fields.Everything()),
		&appsv1.DaemonSet{}, func(dss []*appsv1.DaemonSet) (bool, error) {
			ok := 0
			last = ""
			for _, ds := range dss {
				st := ds.Status
				if st.ObservedGeneration >= ds.Generation && st.DesiredNumberScheduled == int32(f.cfg.Nodes) && st.NumberReady == st.DesiredNumberScheduled {
					ok++
				}
				last += fmt.Sprintf(" %s %d/%d ready", ds.Name, st.NumberReady, st.DesiredNumberScheduled)
			}
			return ok == 2, nil
		})
	if err != nil {
		return fmt.Errorf("waiting for the peer's DaemonSets (%s): %w", last, err)
	}
	return nil
}
