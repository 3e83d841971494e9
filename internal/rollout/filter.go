package rollout

import (
	"context"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/kube"
)

// filteredLW lists and watches through lw and passes on only the objects
// keep accepts, so the informer's store never holds the rest: the pod and
// DaemonSet caches would otherwise hold every pod and DaemonSet of the
// cluster, most of which no node view reads. keep must judge an object by
// its own content only: the informer is never re-listed when anything
// else changes, so a verdict that depends on other objects would go stale.
//
// An object that stops being kept leaves the store as if deleted; an
// object that starts being kept arrives as an update, which the informer
// adds. Deletes of objects never passed on are dropped: the informer
// would hand them to its handlers, and every change of an unrelated pod
// would wake the rollout.
type filteredLW struct {
	lw   cache.ListerWatcherWithContext
	keep func(runtime.Object) bool

	mu sync.Mutex
	// passed holds the keys of the objects passed on as present since the
	// last full list (which replaces the whole store).
	passed map[string]bool
}

func newFilteredLW(lw cache.ListerWatcherWithContext, keep func(runtime.Object) bool) *filteredLW {
	return &filteredLW{lw: lw, keep: keep, passed: map[string]bool{}}
}

// List is ListWithContext for callers without a context (the reflector
// uses the context variants).
func (f *filteredLW) List(opts metav1.ListOptions) (runtime.Object, error) {
	return f.ListWithContext(context.Background(), opts)
}

// Watch is WatchWithContext for callers without a context.
func (f *filteredLW) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return f.WatchWithContext(context.Background(), opts)
}

// ListWithContext lists and drops what keep refuses.
func (f *filteredLW) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	list, err := f.lw.ListWithContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, fmt.Errorf("filter list: %w", err)
	}
	kept := items[:0]
	passed := map[string]bool{}
	for _, o := range items {
		if f.keep(o) {
			kept = append(kept, o)
			if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
				passed[key] = true
			}
		}
	}
	if err := meta.SetList(list, kept); err != nil {
		return nil, fmt.Errorf("filter list: %w", err)
	}
	f.mu.Lock()
	f.passed = passed
	f.mu.Unlock()
	return list, nil
}

// WatchWithContext watches and filters each event (see filteredLW).
func (f *filteredLW) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := f.lw.WatchWithContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		// A streaming list: its initial events replace the store.
		f.mu.Lock()
		f.passed = map[string]bool{}
		f.mu.Unlock()
	}
	return watch.Filter(w, f.event), nil
}

func (f *filteredLW) event(e watch.Event) (watch.Event, bool) {
	if e.Type != watch.Added && e.Type != watch.Modified && e.Type != watch.Deleted {
		return e, true // bookmarks and errors are the reflector's
	}
	key, err := cache.MetaNamespaceKeyFunc(e.Object)
	if err != nil {
		return e, true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	was := f.passed[key]
	switch {
	case e.Type == watch.Deleted:
		delete(f.passed, key)
		return e, was
	case f.keep(e.Object):
		f.passed[key] = true
		return e, true
	case was:
		delete(f.passed, key)
		return watch.Event{Type: watch.Deleted, Object: e.Object}, true
	}
	return e, false
}

// podFieldSelector narrows the pod watch on the API server to pods bound
// to a node and not finished: a node view skips the others.
var podFieldSelector = fields.AndSelectors(
	fields.OneTermNotEqualSelector("spec.nodeName", ""),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
).String()

// cacheScope says which pods and DaemonSets the rollout reads, judged by
// each object's own content (see filteredLW).
type cacheScope struct {
	namespace string
	drivers   labels.Selector
	targets   []TargetSpec
	wait      labels.Selector
	// podNamespaces are the namespaces whose DaemonSet pods the rollout
	// reads: true for every pod of a DaemonSet there (drivers and
	// selector targets, whose DaemonSets a pod does not name), else only
	// those of the DaemonSets in named.
	podNamespaces map[string]bool
	named         map[string]bool // namespace/name of the targets named
}

func newCacheScope(cfg Config) cacheScope {
	s := cacheScope{namespace: cfg.Namespace, drivers: cfg.DriverSelector, targets: cfg.Targets,
		wait: cfg.Policy.WaitForCompletion.Selector, podNamespaces: map[string]bool{cfg.Namespace: true}, named: map[string]bool{}}
	for _, t := range cfg.Targets {
		if t.Name != "" {
			s.named[t.Namespace+"/"+t.Name] = true
		} else {
			s.podNamespaces[t.Namespace] = true
		}
	}
	if s.drivers == nil {
		s.drivers = labels.Nothing()
	}
	return s
}

// daemonSetNamespace is the one namespace every DaemonSet the rollout
// reads lives in, "" if they are in several: the watch is then narrowed
// on the API server.
func (s cacheScope) daemonSetNamespace() string {
	for _, t := range s.targets {
		if t.Namespace != s.namespace {
			return metav1.NamespaceAll
		}
	}
	return s.namespace
}

// keepDaemonSet: the driver DaemonSets and the re-roll targets.
func (s cacheScope) keepDaemonSet(o runtime.Object) bool {
	ds, ok := o.(*appsv1.DaemonSet)
	if !ok {
		return false
	}
	set := labels.Set(ds.Labels)
	if ds.Namespace == s.namespace && s.drivers.Matches(set) {
		return true
	}
	for _, t := range s.targets {
		if ds.Namespace == t.Namespace && (t.Name != "" && ds.Name == t.Name || t.Selector != nil && t.Selector.Matches(set)) {
			return true
		}
	}
	return false
}

// keepPod: the pods a node view reads — those of the driver and re-roll
// DaemonSets, NPU workloads, and the pods waitForCompletion waits for.
// Ordinary workloads, wherever they run, are not cached.
func (s cacheScope) keepPod(o runtime.Object) bool {
	p, ok := o.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "DaemonSet" {
		return s.podNamespaces[p.Namespace] || s.named[p.Namespace+"/"+ref.Name]
	}
	return kube.IsNPUPod(p) || s.wait != nil && !s.wait.Empty() && s.wait.Matches(labels.Set(p.Labels))
}
