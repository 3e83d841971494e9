package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

func key(o *unstructured.Unstructured) string {
	return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
}

// exampleObject is the first object of kind in docs/examples/file.
func exampleObject(t *testing.T, file, kind string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", file))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range decodeAll(t, string(b)) {
		if o.GetKind() == kind {
			return o
		}
	}
	t.Fatalf("no %s in docs/examples/%s", kind, file)
	return nil
}

func decodeAll(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if err.Error() == "EOF" {
				return out
			}
			t.Fatalf("decode manifest: %v", err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// assertNoDrift: every field the chart rendered has the same value in the
// cluster (server defaults may add fields; nobody may change ours).
func assertNoDrift(ctx context.Context, t *testing.T, manifest string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Client.Discovery()))
	checked := 0
	for _, o := range decodeAll(t, manifest) {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s: %v", key(o), err)
			continue
		}
		var res dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			res = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		live, err := res.Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s: %v", key(o), err)
			continue
		}
		want, got := normalize(t, o.Object), normalize(t, live.Object)
		for _, f := range []string{"spec", "data", "rules", "roleRef", "subjects"} {
			if w, ok := want[f]; ok {
				if path, ok := subset(w, got[f], f); !ok {
					t.Errorf("%s drifted at %s: rendered %v", key(o), path, w)
				}
			}
		}
		checked++
	}
	if checked < 10 {
		t.Fatalf("only %d objects checked for drift", checked)
	}
}

// normalize converts m to the plain JSON types unstructured objects hold
// (a deep copy: later changes of m do not leak in).
func normalize(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// subset reports whether want is contained in got; lists compare item by
// item. Resource quantities the server canonicalises ("1Gi" stays, 0.5
// becomes "500m") are compared as strings after the same JSON round trip.
func subset(want, got any, path string) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return path, false
		}
		for k, v := range w {
			if p, ok := subset(v, g[k], path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return path, false
		}
		for i := range w {
			if p, ok := subset(w[i], g[i], path+"["+strconv.Itoa(i)+"]"); !ok {
				return p, false
			}
		}
		return "", true
	case float64:
		if g, ok := got.(string); ok {
			return path, g == strconv.FormatFloat(w, 'f', -1, 64)
		}
	}
	return path, reflect.DeepEqual(want, got)
}
