package chart_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

var env *testbed.Env

func TestMain(m *testing.M) { os.Exit(testbed.Main(m, &env)) }

// serviceMonitorCRD is a minimal stand-in for the Prometheus operator's
// CRD, so the API server can dry-run our ServiceMonitor.
func installServiceMonitorCRD(t *testing.T, ctx context.Context) {
	t.Helper()
	client, err := apiextensionsclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "servicemonitors.monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "servicemonitors", Singular: "servicemonitor", Kind: "ServiceMonitor", ListKind: "ServiceMonitorList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	lw := cache.NewListWatchFromClient(client.ApiextensionsV1().RESTClient(), "customresourcedefinitions", "", fields.OneTermEqualSelector("metadata.name", crd.Name))
	err = testbed.WaitFor(ctx, lw, &apiextensionsv1.CustomResourceDefinition{}, func(crds []*apiextensionsv1.CustomResourceDefinition) (bool, error) {
		for _, c := range crds {
			for _, cond := range c.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("ServiceMonitor CRD not established: %v", err)
	}
}

// Every object of every variant, hooks included, must be accepted by the
// real API server (schema, defaulting and admission) in a server-side
// dry-run create.
func TestEveryVariantIsAcceptedByTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "npu-operator"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	installServiceMonitorCRD(t, ctx)
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Client.Discovery()))

	for _, v := range variants() {
		t.Run(v.name, func(t *testing.T) {
			r := mustRender(t, v)
			for _, o := range r.objects {
				obj := o.DeepCopy()
				if obj.GetKind() == "Namespace" {
					// The namespace exists; dry-run a twin to validate the object.
					obj.SetName(obj.GetName() + "-dryrun")
				}
				gvk := obj.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Errorf("%s %s: no API serves it: %v", gvk, obj.GetName(), err)
					continue
				}
				var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
				if obj.GetNamespace() != "" {
					ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
				}
				if _, err := ri.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
					t.Errorf("API server refused %s %s: %v", gvk.Kind, obj.GetName(), err)
				}
			}
		})
	}
}

// The Helm SDK's lint (what `helm lint --strict` runs) passes with no
// warning, for the defaults and every variant of the matrix.
func TestHelmLintHasNoWarnings(t *testing.T) {
	path := filepath.Join("..", "..", "charts", "npu-stack")
	for _, v := range variants() {
		lint := action.NewLint()
		lint.Strict = true
		lint.Namespace = "npu-operator"
		vals := v.vals
		if vals == nil {
			vals = map[string]any{}
		}
		res := lint.Run([]string{path}, vals)
		for _, msg := range res.Messages {
			if msg.Severity > support.InfoSev {
				t.Errorf("%s: lint %s", v.name, msg)
			}
		}
		for _, err := range res.Errors {
			t.Errorf("%s: lint error: %v", v.name, err)
		}
	}
}
