package docs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func examplesDir(t *testing.T) string { return filepath.Join(repoRoot(t), "docs", "examples") }

// readYAML reads every document of a YAML file (strictly: duplicate keys
// and malformed YAML fail).
func readYAML(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []map[string]any
	for i, raw := range strings.Split(string(b), "\n---") {
		if strings.TrimSpace(stripComments(raw)) == "" {
			continue
		}
		var doc map[string]any
		if err := sigsyaml.UnmarshalStrict([]byte(raw), &doc); err != nil {
			t.Fatalf("%s: document %d: %v", path, i, err)
		}
		docs = append(docs, doc)
	}
	if len(docs) == 0 {
		t.Fatalf("%s: no YAML document", path)
	}
	return docs
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// render renders the chart of this checkout with vals, validating them
// against values.schema.json (unknown keys are rejected), like
// `helm template`.
func render(t *testing.T, what string, vals map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := env.Helm("npu-operator").Render(ctx, "npu-stack", vals); err != nil {
		t.Errorf("%s is not accepted by the chart: %v", what, err)
	}
}

func valuesFile(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal(b, &vals); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return vals
}

func TestExampleValuesFilesRender(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(examplesDir(t), "values-*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %d example values files: %v", len(files), files)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			readYAML(t, f) // well-formed, no duplicate keys
			render(t, f, valuesFile(t, f))
		})
	}
}

// TestInvalidValuesAreCaught proves the check above has teeth: a typo in
// a key fails the render.
func TestInvalidValuesAreCaught(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vals := map[string]any{"driver": map[string]any{"upgradePolicy": map[string]any{"autoUpgrades": true}}}
	if _, err := env.Helm("npu-operator").Render(ctx, "npu-stack", vals); err == nil {
		t.Fatal("a misspelled key (autoUpgrades) was accepted")
	}
}

func get(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

func activeDeadline(vals map[string]any) time.Duration {
	if v, ok := get(vals, "hooks", "activeDeadlineSeconds").(float64); ok {
		return time.Duration(v) * time.Second
	}
	return 7200 * time.Second // chart default
}

func TestFluxExample(t *testing.T) {
	docs := readYAML(t, filepath.Join(examplesDir(t), "flux-helmrelease.yaml"))
	var repo, hr map[string]any
	for _, d := range docs {
		switch d["kind"] {
		case "OCIRepository":
			repo = d
		case "HelmRelease":
			hr = d
		}
	}
	if repo == nil || hr == nil {
		t.Fatalf("want an OCIRepository and a HelmRelease, got %d documents", len(docs))
	}
	if hr["apiVersion"] != "helm.toolkit.fluxcd.io/v2" || repo["apiVersion"] != "source.toolkit.fluxcd.io/v1" {
		t.Errorf("API versions %v, %v", hr["apiVersion"], repo["apiVersion"])
	}
	if u := get(repo, "spec", "url"); u != "oci://ghcr.io/openfuyao/charts/npu-stack" {
		t.Errorf("OCIRepository url %v, want the published chart", u)
	}
	if k, n := get(hr, "spec", "chartRef", "kind"), get(hr, "spec", "chartRef", "name"); k != "OCIRepository" || n != get(repo, "metadata", "name") {
		t.Errorf("chartRef %v/%v does not name the OCIRepository %v", k, n, get(repo, "metadata", "name"))
	}
	if get(hr, "spec", "targetNamespace") != "npu-operator" || get(hr, "spec", "releaseName") != "npu-stack" {
		t.Error("want release npu-stack in npu-operator (the docs' commands assume them)")
	}
	vals, _ := get(hr, "spec", "values").(map[string]any)
	render(t, "HelmRelease spec.values", vals)
	timeout, err := time.ParseDuration(get(hr, "spec", "timeout").(string))
	if err != nil || timeout < activeDeadline(vals) {
		t.Errorf("spec.timeout %v (%v) is shorter than hooks.activeDeadlineSeconds %s", get(hr, "spec", "timeout"), err, activeDeadline(vals))
	}
	if r, _ := get(hr, "spec", "upgrade", "remediation", "retries").(float64); r != 0 {
		t.Errorf("upgrade remediation retries %v would roll the fleet back", r)
	}
}

func TestArgoCDExample(t *testing.T) {
	var app, repo map[string]any
	for _, d := range readYAML(t, filepath.Join(examplesDir(t), "argocd-application.yaml")) {
		switch d["kind"] {
		case "Application":
			app = d
		case "Secret":
			repo = d
		}
	}
	if app == nil || app["apiVersion"] != "argoproj.io/v1alpha1" {
		t.Fatalf("no Argo CD Application in the example")
	}
	url := get(app, "spec", "source", "repoURL")
	if url != "ghcr.io/openfuyao/charts" || get(app, "spec", "source", "chart") != "npu-stack" {
		t.Errorf("source %v chart %v, want the published chart", url, get(app, "spec", "source", "chart"))
	}
	if repo == nil || get(repo, "stringData", "url") != url || get(repo, "stringData", "enableOCI") != "true" ||
		get(repo, "metadata", "labels", "argocd.argoproj.io/secret-type") != "repository" {
		t.Errorf("the repository Secret must declare %v an OCI Helm repository: %v", url, repo)
	}
	if get(app, "spec", "source", "helm", "releaseName") != "npu-stack" || get(app, "spec", "destination", "namespace") != "npu-operator" {
		t.Error("want release npu-stack in npu-operator (the docs' commands assume them)")
	}
	vals, _ := get(app, "spec", "source", "helm", "valuesObject").(map[string]any)
	render(t, "Application valuesObject", vals)
	if get(vals, "hooks", "mode") != "job" {
		t.Error("Argo CD ignores post-rollback: the example must use hooks.mode: job")
	}
	if get(app, "spec", "syncPolicy", "automated", "prune") != true {
		t.Error("prune: true removes the previous driver spec's rollout Job")
	}
}
