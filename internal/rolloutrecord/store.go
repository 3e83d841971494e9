package rolloutrecord

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// ComponentLabel and Component mark a record ConfigMap.
const (
	ComponentLabel = "app.kubernetes.io/component"
	Component      = "rollout-record"
)

// DefaultKeep is how many records (rollouts) a namespace keeps.
const DefaultKeep = 5

// writePause is the least time between two writes of the record: changes
// in between go out together, one write per node step at most.
const writePause = time.Second

// Config wires a Recorder.
type Config struct {
	Client    kubernetes.Interface
	Namespace string
	// Name of the ConfigMap; Versions the rollout's desired versions.
	Name, Versions string
	// Labels of the ConfigMap, ComponentLabel=Component among them.
	Labels     map[string]string
	Keys       contract.Keys
	Clock      clock.Clock
	Log        logrus.FieldLogger
	MaxEntries int
	Keep       int
}

// Recorder keeps a rollout's record and writes it to its ConfigMap: fed
// by the rollout's node informer (OnAdd, OnUpdate), written at most once
// per writePause by Run, and at the end by Flush.
type Recorder struct {
	cfg  Config
	wake chan struct{}

	mu      sync.Mutex
	rec     Record
	dirty   bool
	rv      string // of the ConfigMap as last written or read; "" = not created
	created bool
}

// New returns a Recorder; Load reads what an earlier run left.
func New(cfg Config) *Recorder {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
	}
	l := map[string]string{}
	for k, v := range cfg.Labels {
		l[k] = v
	}
	l[ComponentLabel] = Component
	cfg.Labels = l
	return &Recorder{cfg: cfg, wake: make(chan struct{}, 1), rec: Record{Name: cfg.Name, Versions: cfg.Versions}}
}

// Load reads the record's ConfigMap, if an earlier run wrote one, so this
// run appends to it.
func (r *Recorder) Load(ctx context.Context) error {
	cm, err := r.cfg.Client.CoreV1().ConfigMaps(r.cfg.Namespace).Get(ctx, r.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read rollout record %s/%s: %w", r.cfg.Namespace, r.cfg.Name, err)
	}
	rec, err := Decode(cm.Name, cm.Data)
	if err != nil {
		// An unreadable record is replaced, not fatal to the rollout.
		r.cfg.Log.WithError(err).Warn("starting the rollout record afresh")
		rec = Record{Name: r.cfg.Name}
	}
	rec.Versions = r.cfg.Versions
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rec, r.rv, r.created = rec, cm.ResourceVersion, true
	return nil
}

// Record is a copy of the record as it stands.
func (r *Recorder) Record() Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.rec
	out.Entries = append([]Entry(nil), r.rec.Entries...)
	return out
}

func (r *Recorder) append(es []Entry) {
	if len(es) == 0 {
		return
	}
	r.mu.Lock()
	r.rec.Append(r.cfg.MaxEntries, es...)
	r.dirty = true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// OnAdd records what changed on a node while no rollout watched it
// (cache.ResourceEventHandler).
func (r *Recorder) OnAdd(obj any, _ bool) {
	if n, ok := obj.(*corev1.Node); ok {
		r.mu.Lock()
		es := CatchUp(r.cfg.Keys, r.rec, n, r.cfg.Clock.Now())
		r.mu.Unlock()
		r.append(es)
	}
}

// OnDelete records nothing: a node leaving the fleet ends its row.
func (r *Recorder) OnDelete(any) {}

// OnUpdate records a node's changes.
func (r *Recorder) OnUpdate(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.Node)
	cur, ok2 := newObj.(*corev1.Node)
	if ok1 && ok2 {
		r.append(Changes(r.cfg.Keys, old, cur, r.cfg.Clock.Now()))
	}
}

// Outcome records the end of a run, if the record has entries (a run
// that moved nothing leaves no record).
func (r *Recorder) Outcome(outcome string) {
	r.mu.Lock()
	empty := len(r.rec.Entries) == 0
	r.mu.Unlock()
	if !empty {
		r.append([]Entry{{At: r.cfg.Clock.Now(), Kind: KindOutcome, To: outcome}})
	}
}

// Run writes the record after each change, at most once per writePause,
// until ctx ends. Write errors are logged and retried at the next change.
func (r *Recorder) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		if err := r.Flush(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Log.WithError(err).Warn("cannot write the rollout record; retrying with the next change")
		}
		select {
		case <-ctx.Done():
			return
		case <-r.cfg.Clock.After(writePause):
		}
	}
}

// Flush writes the record now if it changed.
func (r *Recorder) Flush(ctx context.Context) error {
	r.mu.Lock()
	if !r.dirty {
		r.mu.Unlock()
		return nil
	}
	data, rv, created := r.rec.Encode(), r.rv, r.created
	r.dirty = false
	r.mu.Unlock()
	cms := r.cfg.Client.CoreV1().ConfigMaps(r.cfg.Namespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.cfg.Name, Namespace: r.cfg.Namespace, Labels: r.cfg.Labels, ResourceVersion: rv}, Data: data}
	var out *corev1.ConfigMap
	var err error
	if created {
		out, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Someone else touched it (the rollout is the only writer
			// under its lease): this run's record wins.
			out, err = r.replace(ctx, cm)
		}
	} else {
		cm.ResourceVersion = ""
		out, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			out, err = r.replace(ctx, cm)
		}
		if err == nil {
			r.prune(ctx)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.dirty = true
		return fmt.Errorf("write rollout record %s/%s (the rollout's service account needs create and update on configmaps there): %w", r.cfg.Namespace, r.cfg.Name, err)
	}
	r.rv, r.created = out.ResourceVersion, true
	return nil
}

// replace writes cm over whatever the API server holds under its name.
func (r *Recorder) replace(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	cms := r.cfg.Client.CoreV1().ConfigMaps(r.cfg.Namespace)
	cur, err := cms.Get(ctx, cm.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm.ResourceVersion = ""
		return cms.Create(ctx, cm, metav1.CreateOptions{})
	}
	if err != nil {
		return nil, err
	}
	cm.ResourceVersion = cur.ResourceVersion
	return cms.Update(ctx, cm, metav1.UpdateOptions{})
}

// prune deletes the oldest records beyond Keep (this one excepted).
func (r *Recorder) prune(ctx context.Context) {
	cms := r.cfg.Client.CoreV1().ConfigMaps(r.cfg.Namespace)
	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(r.cfg.Labels).String()})
	if err != nil {
		r.cfg.Log.WithError(err).Warn("cannot list old rollout records to prune them")
		return
	}
	for _, name := range Prunable(list.Items, r.cfg.Name, r.cfg.Keep) {
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			r.cfg.Log.WithError(err).WithField("record", name).Warn("cannot delete an old rollout record")
		}
	}
}

// Prunable names the records beyond the newest keep (by creation time),
// never current.
func Prunable(items []corev1.ConfigMap, current string, keep int) []string {
	sort.Slice(items, func(i, j int) bool {
		a, b := items[i].CreationTimestamp, items[j].CreationTimestamp
		if !a.Equal(&b) {
			return b.Before(&a)
		}
		return items[i].Name > items[j].Name
	})
	var out []string
	kept := 0
	for _, cm := range items {
		if cm.Name == current {
			kept++
			continue
		}
		if kept < keep {
			kept++
			continue
		}
		out = append(out, cm.Name)
	}
	return out
}
