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

// helmfileStory: helmfile v1.8 over the helm v4 CLI applies
// docs/examples/helmfile.yaml.gotmpl as it is (release npu-stack in
// npu-operator, values-manual.yaml), the chart from the test bed's
// registry as from a mirror (its NPU_STACK_CHART* variables), this
// fleet's values on the command line; helmfile has no rollback, so
// `helm rollback` as docs/deployers.md says.
func helmfileStory(t *testing.T) {
	ctx := ctxTimeout(t, time.Minute)
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "npu-operator"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	s := newStack(t, "npu-operator", "npu-stack", 2, 1)
	helmfileBin, err := testbed.Engine("bin/helmfile")
	if err != nil {
		t.Fatal(err)
	}
	h := newHelmCLI(t, s, "helm4/helm")
	hf := &helmfile{helmCLI: h, bin: helmfileBin}
	runStory(t, s, hf)
	if !t.Failed() {
		ctx := ctxTimeout(t, 15*time.Minute)
		runCLIFailures(ctx, t, s, h, func(sets ...string) (string, error) { return hf.sync(ctx, writeValues(t, s.vals), sets...) })
	}
}

type helmfile struct {
	*helmCLI
	bin string
}

func (h *helmfile) deploy(ctx context.Context, t *testing.T, vals map[string]any) func() {
	t.Helper()
	file := writeValues(t, vals)
	done := make(chan error, 1)
	go func() {
		_, err := h.sync(ctx, file)
		done <- err
	}()
	return func() {
		t.Helper()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// sync runs `helmfile sync` of the example with the values file and sets
// over it.
func (h *helmfile) sync(ctx context.Context, valuesFile string, sets ...string) (string, error) {
	file := filepath.Join("..", "..", "docs", "examples", "helmfile.yaml.gotmpl")
	mirror := []string{"NPU_STACK_CHART=" + env.Product.ChartRef(), "NPU_STACK_CHART_VERSION=" + env.Product.ChartVersion, "NPU_STACK_PLAIN_HTTP=true"}
	args := []string{"-f", file, "sync", "--values", valuesFile, "--set", "imageRegistry=" + env.Product.Registry}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return runEngine(ctx, h.bin, filepath.Dir(h.helmCLI.bin), mirror, args...)
}
