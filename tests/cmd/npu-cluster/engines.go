package main

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// fluxNamespace is where docs/examples/flux-helmrelease.yaml puts its
// OCIRepository and HelmRelease.
const fluxNamespace = "flux-system"

// startEngines starts the GitOps engines asked for (built by
// ci/build-engines.sh) and returns what stops them.
func startEngines(ctx context.Context, env *testbed.Env, flux, argocd bool) (stop func() error, err error) {
	var stops []func() error
	stop = func() error {
		var errs []error
		for _, s := range stops {
			errs = append(errs, s())
		}
		return errors.Join(errs...)
	}
	if flux {
		f, err := env.StartFlux(ctx)
		if err != nil {
			return stop, fmt.Errorf("start Flux: %w", err)
		}
		stops = append(stops, f.Stop)
		if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fluxNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return stop, fmt.Errorf("create namespace %s: %w", fluxNamespace, err)
		}
		fmt.Printf("flux: source-controller and helm-controller running (logs %s, %s); the chart is %s/%s:%s\n", f.SourceLogPath(), f.LogPath(), env.Product.ChartRepo, testbed.ChartName, env.Product.ChartVersion)
	}
	if argocd {
		a, err := env.StartArgoCD(ctx)
		if err != nil {
			return stop, fmt.Errorf("start Argo CD: %w", err)
		}
		stops = append(stops, a.Stop)
		fmt.Printf("argocd: application controller and repo server running in namespace %s; charts from %s\n", a.Namespace(), a.ChartRepoURL())
	}
	return stop, nil
}
