package docs_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// These tests read a page and the code or chart it describes and compare
// them, the way docfacts_test.go does: each guards a statement a page once
// got wrong.

// readRepo returns a file of the checkout.
func readRepo(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the text under the heading (any level) whose title is
// title, up to the next heading of the same or a higher level.
func section(t *testing.T, text, file, title string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	start, level := -1, 0
	for i, l := range lines {
		h := strings.TrimLeft(l, "#")
		n := len(l) - len(h)
		if n == 0 || !strings.HasPrefix(h, " ") {
			continue
		}
		if start < 0 {
			if strings.TrimSpace(h) == title {
				start, level = i+1, n
			}
			continue
		}
		if n <= level {
			return strings.Join(lines[start:i], "\n")
		}
	}
	if start < 0 {
		t.Fatalf("%s has no section %q", file, title)
	}
	return strings.Join(lines[start:], "\n")
}

// shLines returns the command lines of the ```sh blocks of text.
func shLines(text string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		switch tl := strings.TrimSpace(l); {
		case !in && tl == "```sh":
			in = true
		case in && tl == "```":
			in = false
		case in && tl != "" && !strings.HasPrefix(tl, "#"):
			out = append(out, tl)
		}
	}
	return out
}

// renderClient renders the chart of this checkout offline, as `helm
// template` would, hooks included, under release name rel.
func renderClient(t *testing.T, rel string, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	ch, err := loader.Load(filepath.Join(repoRoot(t), "charts", "npu-stack"))
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = rel, "npu-operator"
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.1", Major: "1", Minor: "37"}
	r, err := inst.RunWithContext(context.Background(), ch, vals)
	if err != nil {
		t.Fatalf("render the chart: %v", err)
	}
	var objs []*unstructured.Unstructured
	manifests := []string{r.Manifest}
	for _, h := range r.Hooks {
		manifests = append(manifests, h.Manifest)
	}
	for _, m := range manifests {
		dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(m), 4096)
		for {
			var o map[string]any
			if err := dec.Decode(&o); err != nil {
				if err.Error() == "EOF" {
					break
				}
				t.Fatal(err)
			}
			if len(o) > 0 {
				objs = append(objs, &unstructured.Unstructured{Object: o})
			}
		}
	}
	return objs
}

// podImages returns every container and init-container image of objs.
func podImages(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		for _, path := range [][]string{
			{"spec", "template", "spec"},
			{"spec", "jobTemplate", "spec", "template", "spec"},
		} {
			spec, ok, _ := unstructured.NestedMap(o.Object, path...)
			if !ok {
				continue
			}
			for _, kind := range []string{"initContainers", "containers"} {
				cs, _, _ := unstructured.NestedSlice(spec, kind)
				for _, c := range cs {
					if img, _ := c.(map[string]any)["image"].(string); img != "" && !slices.Contains(out, img) {
						out = append(out, img)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

var (
	skopeoDest   = regexp.MustCompile(`skopeo copy .* docker://(\S+)$`)
	valuesFlag   = regexp.MustCompile(`-f (docs/examples/\S+\.yaml)`)
	registryFlag = regexp.MustCompile(`imageRegistry=([^,\s]+)`)
	releaseLine  = regexp.MustCompile(`^make release .*REGISTRY=(\S+)`)
)

// TestAirGappedInstallCopiesEveryImage: the README's air-gapped install
// copies (skopeo) or builds (make release) every image the helm command
// after it pulls, so preflight finds each profile's driver image.
func TestAirGappedInstallCopiesEveryImage(t *testing.T) {
	sec := section(t, readRepo(t, "README.md"), "README.md", "Air-gapped install")
	lines := shLines(sec)
	copied, built := map[string]bool{}, ""
	for _, l := range lines {
		if m := skopeoDest.FindStringSubmatch(l); m != nil {
			copied[m[1]] = true
		}
		if m := releaseLine.FindStringSubmatch(l); m != nil {
			built = m[1] + "/npu-stack/"
		}
	}
	installs := 0
	for _, l := range lines {
		if !strings.HasPrefix(l, "helm install ") && !strings.HasPrefix(l, "helm upgrade ") {
			continue
		}
		installs++
		vals := map[string]any{}
		if m := valuesFlag.FindStringSubmatch(l); m != nil {
			vals = valuesFile(t, filepath.Join(repoRoot(t), m[1]))
		}
		m := registryFlag.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("README.md air-gapped install sets no imageRegistry: %s", l)
		}
		vals["imageRegistry"] = m[1]
		for _, img := range podImages(renderClient(t, "npu-stack", vals)) {
			if built != "" && strings.HasPrefix(img, built) {
				continue
			}
			if !copied[img] {
				t.Errorf("README.md air-gapped install pulls %s, which no skopeo copy of the section copies (and make release does not build): %s", img, l)
			}
		}
	}
	if installs == 0 {
		t.Fatal("README.md's air-gapped install has no helm install")
	}
}
