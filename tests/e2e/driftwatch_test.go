package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// driftWatching is a GitOps deployer whose engine reports drift: the story
// watches the engine's own view from the install on, with self-heal off,
// fails if anything the story does makes a managed object drift, and at
// the end plants a drift to show the watch catches one.
type driftWatching interface {
	watchDrift(ctx context.Context, t *testing.T) *driftWatch
	plantDrift(ctx context.Context, t *testing.T, w *driftWatch)
}

// driftWatch is the record of an engine's view: every change of it, for
// the log, and the drift verdicts among them.
type driftWatch struct {
	mu     sync.Mutex
	seen   []string
	drifts []string
	last   map[string]string // per key, the last state recorded
}

func newDriftWatch() *driftWatch { return &driftWatch{last: map[string]string{}} }

// record notes state for key when it changed; drift marks it a verdict.
func (w *driftWatch) record(key, state string, drift bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last[key] == state {
		return
	}
	w.last[key] = state
	line := time.Now().Format("15:04:05.000") + " " + key + ": " + state
	w.seen = append(w.seen, line)
	if drift {
		w.drifts = append(w.drifts, line)
	}
}

// seenKey reports whether key has a recorded state.
func (w *driftWatch) seenKey(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.last[key]
	return ok
}

// driftsMatching lists the drift verdicts containing s.
func (w *driftWatch) driftsMatching(s string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, d := range w.drifts {
		if strings.Contains(d, s) {
			out = append(out, d)
		}
	}
	return out
}

// assertNone fails the story on any drift verdict, logging the whole
// record either way.
func (w *driftWatch) assertNone(t *testing.T, what string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("%s, every change seen:\n  %s", what, strings.Join(w.seen, "\n  "))
	for _, d := range w.drifts {
		t.Errorf("%s: drift caused by the story: %s", what, d)
	}
}

// waitDrift waits until a drift verdict containing s is recorded.
func (w *driftWatch) waitDrift(ctx context.Context, t *testing.T, s string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return len(w.driftsMatching(s)) > 0, nil
	})
	if err == nil {
		t.Logf("the drift watch caught the planted drift of %s:\n  %s", s, strings.Join(w.driftsMatching(s), "\n  "))
		return
	}
	{
		w.mu.Lock()
		defer w.mu.Unlock()
		t.Fatalf("the drift watch never caught the planted drift of %s: %v; seen:\n  %s", s, err, strings.Join(w.seen, "\n  "))
	}
}

// watchObjects runs an informer on gvr objects in ns (field selector
// fieldSel) calling on for each add and update, until the test ends.
func watchObjects(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns, fieldSel string, on func(*unstructured.Unstructured)) {
	t.Helper()
	res := dyn.Resource(gvr).Namespace(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = fieldSel
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = fieldSel
			return res.Watch(ctx, o)
		},
	}
	handle := func(o any) {
		if u, ok := o.(*unstructured.Unstructured); ok {
			on(u)
		}
	}
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: &unstructured.Unstructured{},
		Handler: cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, o any) { handle(o) }}})
	stop := make(chan struct{})
	go ctrl.Run(stop)
	t.Cleanup(func() { close(stop) })
	if !cache.WaitForCacheSync(stop, ctrl.HasSynced) {
		t.Fatalf("watch of %s in %s never synced", gvr.Resource, ns)
	}
}

// eventsGVR: Events through the dynamic client, like the engines' objects.
var eventsGVR = corev1.SchemeGroupVersion.WithResource("events")

// plantedConfigMap changes one data value of the chart's rollout-policy
// ConfigMap in ns behind the engine's back, as a hand edit would, and
// returns the ConfigMap's name and a function restoring the value.
func plantedConfigMap(ctx context.Context, t *testing.T, ns string) (string, func()) {
	t.Helper()
	cms := env.Client.CoreV1().ConfigMaps(ns)
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cm *corev1.ConfigMap
	for i := range list.Items {
		if strings.HasSuffix(list.Items[i].Name, "-rollout-policy") {
			cm = &list.Items[i]
		}
	}
	if cm == nil {
		t.Fatalf("no *-rollout-policy ConfigMap in %s to plant a drift in", ns)
	}
	name := cm.Name
	var k, orig string
	for k, orig = range cm.Data {
		break
	}
	if k == "" {
		t.Fatalf("ConfigMap %s/%s has no data to change", ns, name)
	}
	set := func(v string) {
		c, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.Data[k] = v
		if _, err := cms.Update(ctx, c, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
			t.Fatal(err)
		}
	}
	set(orig + "\n# planted drift")
	return name, func() { set(orig) }
}

// eventDrift is the Flux watch's handler for Events: a DriftDetected
// event for the HelmRelease is a verdict.
func eventDrift(w *driftWatch) func(*unstructured.Unstructured) {
	return func(e *unstructured.Unstructured) {
		reason, _, _ := unstructured.NestedString(e.Object, "reason")
		msg, _, _ := unstructured.NestedString(e.Object, "message")
		w.record("event "+e.GetName(), reason+": "+msg, reason == "DriftDetected")
	}
}

// involvedSelector selects the Events about object kind/name.
func involvedSelector(kind, name string) string {
	return fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.kind", kind), fields.OneTermEqualSelector("involvedObject.name", name)).String()
}

func describe(m map[string]any, keys ...string) string {
	var parts []string
	for _, k := range keys {
		if v, ok := m[k]; ok && v != nil && v != "" {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return strings.Join(parts, " ")
}
