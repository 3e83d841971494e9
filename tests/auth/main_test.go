// Package auth_test proves the chart's trust boundaries on a real API
// server (docs/observability.md, "Trust boundaries"): node agents change only their own Node, only their
// own keys, and delete only pods on their node (the chart's
// ValidatingAdmissionPolicy, keyed on the node-name claim of the agent's
// pod-bound token); every service account holds exactly the rights the code
// uses; the chart's namespace enforces its Pod Security levels.
package auth_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

var env *testbed.Env

func TestMain(m *testing.M) { os.Exit(testbed.Main(m, &env)) }

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// stack is one installation of the chart: release in releaseNS, every
// namespaced object in ns (a Namespace the chart renders, as with
// createNamespace: true), and the service account names of its components.
type stack struct {
	release, releaseNS, ns string
	domain                 string
	keys                   contract.Keys
	fullname               string
	hooks                  string // manifests of the release's hooks
	vals                   map[string]any
}

// sa is the name of component's service account.
func (s *stack) sa(component string) string { return s.fullname + "-" + component }

// username is the API server's user name of component's service account.
func (s *stack) username(component string) string {
	return "system:serviceaccount:" + s.ns + ":" + s.sa(component)
}

// install installs the whole chart (hooks disabled: nothing here needs the
// rollout to run) under a label domain of its own. npuNodeSelector
// matches no node, so no agent pod starts: the tests act with the agents'
// identities themselves.
func install(t *testing.T, base string, extra map[string]any) *stack {
	t.Helper()
	ctx := ctxTimeout(t, 3*time.Minute)
	releaseNS, err := env.NewNamespace(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{release: releaseNS, releaseNS: releaseNS, ns: releaseNS + "-npu", fullname: releaseNS}
	// A domain per installation, as two installations of one cluster
	// would use: each policy must guard its own keys.
	s.domain = strings.TrimSuffix(releaseNS, "-") + ".npu.example.com"
	if s.keys, err = contract.NewKeys(s.domain); err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{
		"fullnameOverride": s.fullname,
		"namespace":        s.ns,
		"createNamespace":  true,
		"labelDomain":      s.domain,
		"npuNodeSelector":  map[string]any{"npu-stack.test/auth": releaseNS},
		"hooks":            map[string]any{"resume": map[string]any{"enabled": false}},
		// On by default in the chart, off by default in the test bed
		// (testbed Helm values); its service account is checked here.
		"fleetExporter": map[string]any{"enabled": true},
	}
	for k, v := range extra {
		vals[k] = v
	}
	rel, err := env.Helm(releaseNS).Install(ctx, s.release, vals, testbed.InstallOptions{DisableHooks: true})
	if err != nil {
		t.Fatal(err)
	}
	var hooks []string
	for _, h := range rel.Hooks {
		hooks = append(hooks, h.Manifest)
	}
	s.hooks = strings.Join(hooks, "\n---\n")
	s.vals = vals
	t.Cleanup(func() {
		if err := env.Helm(releaseNS).Uninstall(s.release); err != nil {
			t.Logf("uninstall: %v", err)
		}
	})
	return s
}

// clientAs is a client authenticated with token only (no admin
// certificate), as a pod's process is.
func clientAs(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	cfg := env.Config()
	cfg.TLSClientConfig = rest.TLSClientConfig{CAData: env.CAData()}
	cfg.BearerToken = token
	cfg.WarningHandler = rest.NoWarnings{}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// token mints a token for service account sa of namespace ns; bound to
// pod when it is set, as the kubelet does for a pod's projected token.
func token(t *testing.T, ns, sa string, pod *corev1.Pod) string {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := env.Client.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, sa, err)
	}
	return tr.Status.Token
}

// createPod creates a pod bound to node (no scheduler) in ns, running as
// service account sa ("" = default).
func createPod(t *testing.T, ns, name, node, sa string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			ServiceAccountName:            sa,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers:                    []corev1.Container{{Name: "c", Image: "registry.invalid/pause:1"}},
		},
	}
	p, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s on %s: %v", ns, name, node, err)
	}
	return p
}

// wantForbidden fails unless err is a Forbidden whose message contains
// every one of want (the policy's own words: a refusal for another reason,
// such as RBAC, does not count).
func wantForbidden(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: allowed, want refused", what)
		return
	}
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: %v, want Forbidden", what, err)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: refused with %q, want a message containing %q", what, err.Error(), w)
		}
	}
}

func wantAllowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want allowed", what, err)
	}
}

// errString is err's message, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return fmt.Sprintf("%s (%d)", st.Status().Message, st.Status().Code)
	}
	return err.Error()
}
