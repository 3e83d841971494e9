package e2e_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestHelmfileStory: helmfile v1.8 over the helm v4 CLI applies
// docs/examples/helmfile.yaml.gotmpl as it is (release npu-stack in
// npu-operator, values-manual.yaml), the chart from the test bed's
// registry as from a mirror (its NPU_STACK_CHART* variables), this
// fleet's values on the command line; helmfile has no rollback, so
// `helm rollback` as docs/deployers.md says.
func TestHelmfileStory(t *testing.T) {
	ctx := ctxTimeout(t, time.Minute)
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "npu-operator"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	s := newStack(t, "npu-operator", "npu-stack", 2, 1)
	hf, err := testbed.Engine("bin/helmfile")
	if err != nil {
		t.Fatal(err)
	}
	h := newHelmCLI(t, s, "helm4/helm")
	runStory(t, s, &helmfile{helmCLI: h, bin: hf})
}

type helmfile struct {
	*helmCLI
	bin string
}

func (h *helmfile) deploy(ctx context.Context, t *testing.T, vals map[string]any) func() {
	t.Helper()
	file := filepath.Join("..", "..", "docs", "examples", "helmfile.yaml.gotmpl")
	mirror := []string{"NPU_STACK_CHART=" + env.Product.ChartRef(), "NPU_STACK_CHART_VERSION=" + env.Product.ChartVersion, "NPU_STACK_PLAIN_HTTP=true"}
	run := func(ctx context.Context, args ...string) (string, error) {
		return runEngine(ctx, h.bin, filepath.Dir(h.helmCLI.bin), mirror, args...)
	}
	return asyncRun(ctx, t, run, "-f", file, "sync", "--values", writeValues(t, vals), "--set", "imageRegistry="+env.Product.Registry)
}
