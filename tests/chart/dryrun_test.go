package chart_test

import (
	"bytes"
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

var env *testbed.Env

func TestMain(m *testing.M) { os.Exit(testbed.MainUnlessShort(m, &env)) }

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
	waitEstablished(t, ctx, client, crd.Name)
}

// installNFDCRD installs Node Feature Discovery's own NodeFeatureRule CRD
// (testdata/crds, copied from the v0.19.0 module), so the API server
// validates the chart's rule against NFD's schema.
func installNFDCRD(t *testing.T, ctx context.Context) {
	t.Helper()
	client, err := apiextensionsclient.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join("testdata", "crds", "nfd-nodefeaturerules-v0.19.0.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(crd); err != nil {
		t.Fatalf("decode the NFD CRD: %v", err)
	}
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	waitEstablished(t, ctx, client, crd.Name)
}

func waitEstablished(t *testing.T, ctx context.Context, client apiextensionsclient.Interface, name string) {
	t.Helper()
	lw := cache.NewListWatchFromClient(client.ApiextensionsV1().RESTClient(), "customresourcedefinitions", "", fields.OneTermEqualSelector("metadata.name", name))
	err := testbed.WaitFor(ctx, lw, &apiextensionsv1.CustomResourceDefinition{}, func(crds []*apiextensionsv1.CustomResourceDefinition) (bool, error) {
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
		t.Fatalf("CRD %s not established: %v", name, err)
	}
}

// Every object of every variant, hooks included, must be accepted by the
// real API server (schema, defaulting and admission) in a server-side
// dry-run create.
func TestEveryVariantIsAcceptedByTheAPIServer(t *testing.T) {
	testbed.NeedEnv(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "npu-operator"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	installServiceMonitorCRD(t, ctx)
	installNFDCRD(t, ctx)
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

// The chart's NodeFeatureRule is valid under NFD's own CRD schema, which
// the API server enforces: the same rule with an operator NFD does not
// know is refused.
func TestNodeFeatureRuleMatchesNFDSchema(t *testing.T) {
	testbed.NeedEnv(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	installNFDCRD(t, ctx)
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	ri := dyn.Resource(schema.GroupVersionResource{Group: "nfd.k8s-sigs.io", Version: "v1alpha1", Resource: "nodefeaturerules"})
	rule := mustRender(t, variant{name: "nfr", vals: map[string]any{"nodeFeatureRule": map[string]any{"enabled": true}}}).find("NodeFeatureRule", "npu-stack-npu")
	if rule == nil {
		t.Fatal("nodeFeatureRule.enabled rendered no NodeFeatureRule npu-stack-npu")
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}
	if _, err := ri.Create(ctx, rule, dryRun); err != nil {
		t.Fatalf("the API server refused the chart's NodeFeatureRule under NFD's schema: %v", err)
	}
	broken := rule.DeepCopy()
	rules, _, _ := unstructured.NestedSlice(broken.Object, "spec", "rules")
	expr := rules[0].(map[string]any)["matchFeatures"].([]any)[0].(map[string]any)["matchExpressions"].(map[string]any)
	expr["vendor"].(map[string]any)["op"] = "Equals"
	if err := unstructured.SetNestedSlice(broken.Object, rules, "spec", "rules"); err != nil {
		t.Fatal(err)
	}
	if _, err := ri.Create(ctx, broken, dryRun); err == nil || !apierrors.IsInvalid(err) {
		t.Fatalf("a NodeFeatureRule with op Equals was not refused as invalid (%v): the CRD schema is not applied", err)
	}
}

// The Helm SDK's lint (what `helm lint --strict` runs) passes with no
// warning, for the defaults and every variant of the matrix.
func TestHelmLintHasNoWarnings(t *testing.T) {
	testbed.NeedEnv(t, env)
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
