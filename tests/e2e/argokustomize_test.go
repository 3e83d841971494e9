package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The DefaultHookMode story applies docs/examples/argocd-application.yaml
// as a user does: the example verbatim beside docs/deployers.md's Argo CD
// kustomization, with the user's edits (the mirror's URL, the chart
// version there, the values), by `kubectl apply -k`, and every later
// values change by applying again.

// argoKustomization is docs/deployers.md's Argo CD kustomization with the
// user's edits: the mirror's URL, the chart version mirrored there, and
// the insecureOCIForceHttp line uncommented (the test bed's registry has
// no TLS).
func (d *argoDeployer) argoKustomization(t *testing.T) string {
	t.Helper()
	return docKustomization(t, "# kustomization.yaml (Argo CD)", [][2]string{
		{`registry\.example\.com/openfuyao/charts`, d.argo.ChartRepoURL()},
		{`targetRevision, value: "[^"]*"`, fmt.Sprintf("targetRevision, value: %q", env.Product.ChartVersion)},
		{withoutTLS("/stringData/insecureOCIForceHttp"), "${1}${2}"},
	})
}

// argoObserve is the test's own patch, after the user's: the Application,
// its release and destination named after the test's stack (the stories
// share one Argo CD), and self-heal off while the drift watch looks.
func (d *argoDeployer) argoObserve() string {
	return fmt.Sprintf(`  - target: {kind: Application, name: npu-stack}
    patch: |-
      - {op: replace, path: /metadata/name, value: %q}
      - {op: replace, path: /spec/source/helm/releaseName, value: %q}
      - {op: replace, path: /spec/destination/namespace, value: %q}
      - {op: replace, path: /spec/syncPolicy/automated/selfHeal, value: false}
`, d.s.release, d.s.release, d.s.ns)
}

// applyKustomization lays out the user's directory with vals as the
// values patch, checks the documented edits on the first call, applies it
// and returns the Application's resulting valuesObject.
func (d *argoDeployer) applyKustomization(ctx context.Context, t *testing.T, vals map[string]any) map[string]any {
	t.Helper()
	if d.kdir == "" {
		d.kdir = t.TempDir()
		d.writeArgoKustomization(t, vals, false)
		checkArgoEdits(ctx, t, d.kdir)
		t.Cleanup(func() {
			_ = env.Client.CoreV1().Secrets(d.argo.Namespace()).Delete(context.Background(), "npu-stack-charts", metav1.DeleteOptions{})
		})
	}
	d.writeArgoKustomization(t, vals, true)
	var app *unstructured.Unstructured
	for _, o := range decodeAll(t, kubectl(ctx, t, "kubectl kustomize "+d.kdir)) {
		if o.GetKind() == "Application" {
			app = o
		}
	}
	if app == nil {
		t.Fatal("the kustomization renders no Application")
	}
	kubectl(ctx, t, "kubectl apply -k "+d.kdir)
	if !slices.Contains(d.created, d.s.release) {
		d.created = append(d.created, d.s.release)
	}
	out, _, err := unstructured.NestedMap(app.Object, "spec", "source", "helm", "valuesObject")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (d *argoDeployer) writeArgoKustomization(t *testing.T, vals map[string]any, observe bool) {
	t.Helper()
	example, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", "argocd-application.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	patch, err := yaml.Marshal(map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
		"metadata": map[string]any{"name": "npu-stack", "namespace": "argocd"},
		"spec":     map[string]any{"source": map[string]any{"helm": map[string]any{"valuesObject": vals}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	k := d.argoKustomization(t)
	if observe {
		k += d.argoObserve()
	}
	for name, data := range map[string][]byte{
		"argocd-application.yaml": example,
		"kustomization.yaml":      []byte(k),
		"values-patch.yaml":       patch,
	} {
		if err := os.WriteFile(filepath.Join(d.kdir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkArgoEdits: the documented kustomization's output differs from the
// example in the repository's URL (and its plain-HTTP and credential
// keys), the chart version and the values only, and does change the URLs
// and the values.
func checkArgoEdits(ctx context.Context, t *testing.T, dir string) {
	t.Helper()
	checkEdits(ctx, t, dir, "argocd-application.yaml", map[string]*regexp.Regexp{
		"Secret":      regexp.MustCompile(`^\.stringData\.(url|insecureOCIForceHttp|username|password)$`),
		"Application": regexp.MustCompile(`^\.spec\.source\.(repoURL|targetRevision|helm\.valuesObject(\..*)?)$`),
	}, "Secret .stringData.url", "Application .spec.source.repoURL", "Application .spec.source.helm.valuesObject")
}
