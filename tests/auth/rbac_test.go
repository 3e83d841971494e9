package auth_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// everyone is what the API server's bootstrap roles give every
// authenticated user: asking what it may do (system:basic-user) and
// reading the cluster's trust bundles (system:cluster-trust-bundle-discovery,
// with the ClusterTrustBundle feature on by default).
var everyone = []string{
	"create selfsubjectaccessreviews.authorization.k8s.io",
	"create selfsubjectrulesreviews.authorization.k8s.io",
	"create selfsubjectreviews.authentication.k8s.io",
	"get clustertrustbundles.certificates.k8s.io",
	"list clustertrustbundles.certificates.k8s.io",
	"watch clustertrustbundles.certificates.k8s.io",
}

// allowlist is, per component, every right its service account holds in
// the chart's namespace (cluster-wide rules included), as the API server
// reports it: "<verb> <resource>[.<group>]". It is the code's use of the
// API (see the comments in templates/rbac.yaml); a new right must be added
// here deliberately, with the call that needs it.
var allowlist = map[string][]string{
	// driver entry: get its Node, patch driver-version; health-watch: get
	// its Node, patch driver-ready and the recovery request (the driver
	// entry also list-watches its Node, by name, for its reboot), and on a
	// wedge list and delete the device-plugin pod of its own node (this
	// namespace only); before an install over a loaded driver, driver
	// entry gets and lists the DaemonSets it stops (--stop: the device
	// plugin, the exporter, rerollTargets) and lists and deletes their
	// pods on its node (this namespace, and the same four rights in each
	// other namespace of rerollTargets); Node events.
	"driver": {"get nodes", "list nodes", "watch nodes", "patch nodes", "list pods", "delete pods",
		"get daemonsets.apps", "list daemonsets.apps", "create events", "patch events"},
	// The vendor device plugin (MindCluster v7.3.0 pkg/kubeclient): gets
	// and patches its Node and the node status, watches and patches the
	// pods of its node, watches the reset ConfigMaps and updates the
	// reset/fault ConfigMaps of the jobs' namespaces; creates in
	// kube-system only (kubeSystemAllowlist); GETs its kubelet's /pods
	// (getPodsByKltPort), which a 1.33+ kubelet authorizes as get
	// nodes/pods (the control plane here is 1.37: no nodes/proxy).
	"device-plugin": {
		"get nodes", "patch nodes", "patch nodes/status", "get nodes/pods",
		"get pods", "list pods", "watch pods", "patch pods",
		"get configmaps", "list configmaps", "watch configmaps", "update configmaps",
	},
	// The vendor exporter never calls the API.
	"exporter": {},
	// Watches its Node (and the NPU nodes' metadata), patches it; deletes
	// the NPU pods of its own wedged node (list, delete, get to wait),
	// asking for the DaemonSet of the pods it skips; reads and writes
	// Node events; reboot slots are Leases of this namespace.
	"rebooter": {
		"get nodes", "list nodes", "watch nodes", "patch nodes",
		"get pods", "list pods", "delete pods",
		"get daemonsets.apps",
		"create events", "patch events", "list events",
		"list leases.coordination.k8s.io", "watch leases.coordination.k8s.io",
		"create leases.coordination.k8s.io", "update leases.coordination.k8s.io",
	},
	// Watches NPU nodes, pods, DaemonSets; patches nodes; evicts (PDBs
	// honoured) and drains; deletes pods to re-roll them; leader election
	// on one Lease; reads and watches its policy ConfigMap; creates,
	// updates and prunes its rollout records (ConfigMaps).
	"rollout": {
		"get nodes", "list nodes", "watch nodes", "patch nodes",
		"get pods", "list pods", "watch pods", "delete pods", "create pods/eviction",
		"get daemonsets.apps", "list daemonsets.apps", "watch daemonsets.apps",
		"create events", "patch events",
		"get leases.coordination.k8s.io", "create leases.coordination.k8s.io", "update leases.coordination.k8s.io",
		"get configmaps", "list configmaps", "watch configmaps", "create configmaps", "update configmaps", "delete configmaps",
	},
	// The NRI injector: on its own Node, reads and patches the
	// injection-status annotation and posts NRIUnavailable events.
	"nri-injector": {"get nodes", "patch nodes", "create events", "patch events"},
	// Lists the NPU nodes and the pods on them (kubectl's drain library,
	// which asks for the DaemonSet of each DaemonSet pod).
	"preflight": {"list nodes", "list pods", "get daemonsets.apps"},
	// npu-hooks uninstall (the pre-delete hook of uninstall.cleanup):
	// deletes the resume CronJob, the rollout and preflight Jobs and
	// their pods (watched until gone); the rollout's Lease (read, watched
	// for a holder still renewing it, deleted), the reboot slots and the
	// rollout records (ConfigMaps; listed, deleted); marks and deletes the DaemonSets (listed), their
	// pods watched until gone; lists and patches every node (get to
	// decide again after a conflict); lists the HostFilesRemoved Events.
	"uninstall": {
		"get nodes", "list nodes", "patch nodes", "list events",
		"list cronjobs.batch", "delete cronjobs.batch", "list jobs.batch", "delete jobs.batch",
		"list pods", "watch pods", "delete pods",
		"list daemonsets.apps", "patch daemonsets.apps", "delete daemonsets.apps",
		"get leases.coordination.k8s.io", "list leases.coordination.k8s.io", "watch leases.coordination.k8s.io", "delete leases.coordination.k8s.io",
		"list configmaps", "delete configmaps",
	},
	// The fleet exporter (npu-hooks exporter), read-only: list-watches the
	// NPU nodes and, in the chart's namespace, the driver DaemonSets, the
	// rollout Jobs and the rollout records (ConfigMaps).
	"fleet-exporter": {
		"list nodes", "watch nodes", "list daemonsets.apps", "watch daemonsets.apps",
		"list jobs.batch", "watch jobs.batch", "list configmaps", "watch configmaps",
	},
}

// kubeSystemAllowlist is what a component holds in kube-system beyond its
// cluster-wide rights: the vendor device plugin creates its
// mindx-dl-deviceinfo-<node> ConfigMap and its fault Events there
// (MindCluster api.KubeNS).
var kubeSystemAllowlist = map[string][]string{
	"device-plugin": {"create configmaps", "create events"},
}

// TestEveryServiceAccountHoldsExactlyItsAllowlist installs the chart (and
// its preflight hook's RBAC, which a real install creates just before the
// preflight Job) and asks the API server, with each service account's own
// token, what it may do in the chart's namespace (SelfSubjectRulesReview):
// the answer must be its allowlist, no more and no less. No account may
// read Secrets or exec into (or attach to) pods, in any namespace.
func TestEveryServiceAccountHoldsExactlyItsAllowlist(t *testing.T) {
	ctx := ctxTimeout(t, 4*time.Minute)
	s := install(t, "rbac", nil)
	createHookRBAC(ctx, t, s)
	createUninstallHookRBAC(ctx, t, s)

	sas, err := env.Client.CoreV1().ServiceAccounts(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + s.release})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sa := range sas.Items {
		got = append(got, strings.TrimPrefix(sa.Name, s.fullname+"-"))
	}
	slices.Sort(got)
	var want []string
	for comp := range allowlist {
		want = append(want, comp)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the chart creates service accounts %v; the allowlist covers %v", got, want)
	}

	for _, comp := range want {
		t.Run(comp, func(t *testing.T) {
			c := clientAs(t, token(t, s.ns, s.sa(comp), nil))
			rules := rulesOf(ctx, t, c, s.ns)
			wantRules := append(slices.Clone(allowlist[comp]), everyone...)
			slices.Sort(wantRules)
			if extra := minus(rules.resource, wantRules); len(extra) > 0 {
				t.Errorf("%s holds rights not in its allowlist: %q (add each to the allowlist with the call that needs it, or take it out of the chart)", s.sa(comp), extra)
			}
			if missing := minus(wantRules, rules.resource); len(missing) > 0 {
				t.Errorf("%s lacks allowlisted rights %q (take them out of the allowlist if the code no longer calls them)", s.sa(comp), missing)
			}
			for _, r := range rules.nonResource {
				if !strings.HasPrefix(r, "get ") {
					t.Errorf("%s may %s", s.sa(comp), r)
				}
			}
			if rules.incomplete {
				t.Errorf("the rules review of %s is incomplete: %s", s.sa(comp), rules.evalErr)
			}

			// kube-system: its cluster-wide rights (what it holds in a
			// namespace the chart puts no Role in) plus kubeSystemAllowlist.
			ks, cluster := rulesOf(ctx, t, c, "kube-system"), rulesOf(ctx, t, c, metav1.NamespaceDefault)
			wantKS := append(slices.Clone(cluster.resource), kubeSystemAllowlist[comp]...)
			slices.Sort(wantKS)
			wantKS = slices.Compact(wantKS)
			if extra := minus(ks.resource, wantKS); len(extra) > 0 {
				t.Errorf("%s holds rights in kube-system beyond its cluster-wide ones and its kubeSystemAllowlist: %q", s.sa(comp), extra)
			}
			if missing := minus(wantKS, ks.resource); len(missing) > 0 {
				t.Errorf("%s lacks rights in kube-system: %q", s.sa(comp), missing)
			}

			// Asked the other way, for every namespace.
			for _, ask := range []authorizationv1.ResourceAttributes{
				{Verb: "get", Resource: "secrets"}, {Verb: "list", Resource: "secrets"}, {Verb: "watch", Resource: "secrets"},
				{Verb: "get", Resource: "secrets", Namespace: s.ns}, {Verb: "list", Resource: "secrets", Namespace: s.ns},
				{Verb: "create", Resource: "pods", Subresource: "exec"}, {Verb: "get", Resource: "pods", Subresource: "exec"},
				{Verb: "create", Resource: "pods", Subresource: "attach"}, {Verb: "get", Resource: "pods", Subresource: "attach"},
				{Verb: "create", Resource: "serviceaccounts", Subresource: "token"},
				{Verb: "escalate", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
				{Verb: "impersonate", Resource: "serviceaccounts"},
			} {
				r, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
					Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ask}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if r.Status.Allowed {
					t.Errorf("%s may %s %s/%s in namespace %q", s.sa(comp), ask.Verb, ask.Resource, ask.Subresource, ask.Namespace)
				}
			}
		})
	}
}

// rules is a SelfSubjectRulesReview flattened to "<verb> <resource>[.<group>]"
// (resource names, if any, in brackets) and "<verb> <url>".
type rules struct {
	resource, nonResource []string
	incomplete            bool
	evalErr               string
}

func rulesOf(ctx context.Context, t *testing.T, c kubernetes.Interface, ns string) rules {
	t.Helper()
	r, err := c.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out rules
	for _, rule := range r.Status.ResourceRules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					name := res
					if g != "" {
						name += "." + g
					}
					if len(rule.ResourceNames) > 0 {
						name += fmt.Sprintf("%q", rule.ResourceNames)
					}
					out.resource = append(out.resource, v+" "+name)
				}
			}
		}
	}
	for _, rule := range r.Status.NonResourceRules {
		for _, u := range rule.NonResourceURLs {
			for _, v := range rule.Verbs {
				out.nonResource = append(out.nonResource, v+" "+u)
			}
		}
	}
	slices.Sort(out.resource)
	out.resource = slices.Compact(out.resource)
	out.incomplete, out.evalErr = r.Status.Incomplete, r.Status.EvaluationError
	return out
}

// minus is a without the elements of b.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// createUninstallHookRBAC creates the RBAC of the pre-delete hook of
// uninstall.cleanup, rendered with the release's values plus that one:
// installed with it, the test's helm uninstall would run the hook, whose
// Job no node here runs.
func createUninstallHookRBAC(ctx context.Context, t *testing.T, s *stack) {
	t.Helper()
	vals := maps.Clone(s.vals)
	vals["uninstall"] = map[string]any{"cleanup": true}
	rel, err := env.Helm(s.releaseNS).Render(ctx, s.release, vals)
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, h := range rel.Hooks {
		if strings.Contains(h.Manifest, "app.kubernetes.io/component: uninstall") {
			docs = append(docs, h.Manifest)
		}
	}
	if len(docs) == 0 {
		t.Fatal("uninstall.cleanup renders no hook")
	}
	createHookRBAC(ctx, t, &stack{hooks: strings.Join(docs, "\n---\n")})
}

// createHookRBAC creates the RBAC objects of the release's hooks (the
// preflight's service account, role and binding) as Helm would before the
// preflight Job, and removes the cluster-scoped ones afterwards.
func createHookRBAC(ctx context.Context, t *testing.T, s *stack) {
	t.Helper()
	dec := scheme.Codecs.UniversalDeserializer()
	for _, doc := range strings.Split(s.hooks, "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, _, err := dec.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("decode hook manifest: %v\n%s", err, doc)
		}
		if err := createObject(ctx, obj); err != nil {
			t.Fatal(err)
		}
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			t.Cleanup(func() {
				_ = env.Client.RbacV1().ClusterRoles().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
			})
		case *rbacv1.ClusterRoleBinding:
			t.Cleanup(func() {
				_ = env.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
			})
		}
	}
}

func createObject(ctx context.Context, obj runtime.Object) error {
	var err error
	switch o := obj.(type) {
	case *corev1.ServiceAccount:
		_, err = env.Client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRole:
		_, err = env.Client.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = env.Client.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.Role:
		_, err = env.Client.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.RoleBinding:
		_, err = env.Client.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	default:
		return nil // the hook Jobs: not RBAC
	}
	if err != nil {
		return fmt.Errorf("create hook %T: %w", obj, err)
	}
	return nil
}
