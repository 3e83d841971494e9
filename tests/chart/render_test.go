package chart_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// rendered is one variant of the chart: every object, hooks included.
type rendered struct {
	objects []*unstructured.Unstructured
	notes   string
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(filepath.Join("..", "..", "charts", "npu-stack"))
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return c
}

type renderOpts struct {
	apiVersions []string
	// kubeVersion is the cluster's version ("v1.32.0"); default v1.37.1,
	// the test bed's.
	kubeVersion string
}

// render renders the chart like `helm install --dry-run` (client only),
// with values validated against values.schema.json.
func render(t *testing.T, vals map[string]any, opts renderOpts) (*rendered, error) {
	t.Helper()
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "npu-stack", "npu-operator"
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.1", Major: "1", Minor: "37"}
	if opts.kubeVersion != "" {
		kv, err := chartutil.ParseKubeVersion(opts.kubeVersion)
		if err != nil {
			return nil, err
		}
		inst.KubeVersion = kv
	}
	inst.APIVersions = append(chartutil.VersionSet{}, opts.apiVersions...)
	rel, err := inst.RunWithContext(context.Background(), loadChart(t), vals)
	if err != nil {
		return nil, err
	}
	out := &rendered{notes: rel.Info.Notes}
	docs := []string{rel.Manifest}
	for _, h := range rel.Hooks {
		docs = append(docs, h.Manifest)
	}
	for _, d := range docs {
		objs, err := decode(d)
		if err != nil {
			return nil, err
		}
		out.objects = append(out.objects, objs...)
	}
	return out, nil
}

func decode(manifest string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if err.Error() == "EOF" {
				return objs, nil
			}
			return nil, fmt.Errorf("decode rendered manifest: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

func (r *rendered) find(kind, name string) *unstructured.Unstructured {
	for _, o := range r.objects {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func (r *rendered) ofKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func (r *rendered) names(kind string) []string {
	var out []string
	for _, o := range r.ofKind(kind) {
		out = append(out, o.GetName())
	}
	sort.Strings(out)
	return out
}

var _ = release.HookPreInstall
