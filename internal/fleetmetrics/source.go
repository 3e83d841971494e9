package fleetmetrics

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/rollout"
)

// Watch says what the exporter reads of the cluster.
type Watch struct {
	Client    kubernetes.Interface
	Keys      contract.Keys
	Namespace string
	// NodeSelector selects the NPU nodes, DriverSelector the driver
	// DaemonSets in Namespace, JobSelector the rollout Jobs there and
	// RecordSelector the rollout records (ConfigMaps) there.
	NodeSelector, DriverSelector, JobSelector, RecordSelector labels.Selector
	// ReadRecord reads a record ConfigMap (nil: records are not read).
	ReadRecord func(*corev1.ConfigMap) (Record, error)
}

// Informers are the exporter's watches: NPU nodes, driver DaemonSets,
// rollout Jobs and rollout records, each cached slim.
type Informers struct {
	w         Watch
	factories []informers.SharedInformerFactory
	nodes     cache.Indexer
	drivers   cache.Indexer
	jobs      cache.Indexer
	records   cache.Indexer
	synced    []cache.InformerSynced
}

// NewInformers sets up the watches; Start runs them.
func NewInformers(w Watch) *Informers {
	slim := rollout.SlimTransform(w.Keys)
	selected := func(sel labels.Selector) informers.SharedInformerOption {
		return informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel.String() })
	}
	nodeF := informers.NewSharedInformerFactoryWithOptions(w.Client, 0, informers.WithTransform(slim), selected(w.NodeSelector))
	dsF := informers.NewSharedInformerFactoryWithOptions(w.Client, 0, informers.WithTransform(slim), informers.WithNamespace(w.Namespace), selected(w.DriverSelector))
	jobF := informers.NewSharedInformerFactoryWithOptions(w.Client, 0, informers.WithTransform(slimJob), informers.WithNamespace(w.Namespace), selected(w.JobSelector))
	i := &Informers{w: w, factories: []informers.SharedInformerFactory{nodeF, dsF, jobF}}
	ni, di, ji := nodeF.Core().V1().Nodes().Informer(), dsF.Apps().V1().DaemonSets().Informer(), jobF.Batch().V1().Jobs().Informer()
	i.nodes, i.drivers, i.jobs = ni.GetIndexer(), di.GetIndexer(), ji.GetIndexer()
	i.synced = []cache.InformerSynced{ni.HasSynced, di.HasSynced, ji.HasSynced}
	if w.ReadRecord != nil {
		cmF := informers.NewSharedInformerFactoryWithOptions(w.Client, 0, informers.WithNamespace(w.Namespace), selected(w.RecordSelector))
		ci := cmF.Core().V1().ConfigMaps().Informer()
		i.factories = append(i.factories, cmF)
		i.records = ci.GetIndexer()
		i.synced = append(i.synced, ci.HasSynced)
	}
	return i
}

// Start runs the watches and waits for their caches.
func (i *Informers) Start(ctx context.Context) error {
	for _, f := range i.factories {
		f.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), i.synced...) {
		return fmt.Errorf("fleet exporter: the watches of NPU nodes, driver DaemonSets and rollout Jobs in %s did not sync (can its service account list and watch them?): %w", i.w.Namespace, ctx.Err())
	}
	return nil
}

// Synced is true once every cache has its first list.
func (i *Informers) Synced() bool {
	for _, s := range i.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Inputs reads the caches: the Source of a Collector.
func (i *Informers) Inputs() (Inputs, error) {
	if !i.Synced() {
		return Inputs{}, fmt.Errorf("fleet exporter: the node and Job caches have not synced yet")
	}
	var nodes []*corev1.Node
	for _, o := range i.nodes.List() {
		if n, ok := o.(*corev1.Node); ok {
			nodes = append(nodes, n)
		}
	}
	var in rollout.Inputs
	in.Nodes = nodes
	for _, o := range i.drivers.List() {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			in.Drivers = append(in.Drivers, ds)
		}
	}
	snap := rollout.BuildSnapshot(in, rollout.View{Keys: i.w.Keys})
	out := Inputs{Nodes: snap.Nodes}
	for _, o := range i.jobs.List() {
		if j, ok := o.(*batchv1.Job); ok {
			out.Jobs = append(out.Jobs, jobOf(j))
		}
	}
	if i.records != nil {
		for _, o := range i.records.List() {
			cm, ok := o.(*corev1.ConfigMap)
			if !ok {
				continue
			}
			r, err := i.w.ReadRecord(cm)
			if err != nil {
				// One unreadable record must not hide the fleet.
				r = Record{Name: cm.Name, Outcome: "unreadable"}
			}
			out.Records = append(out.Records, r)
		}
	}
	return out, nil
}
