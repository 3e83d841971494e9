package auth_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

const nodeNameClaim = "authentication.kubernetes.io/node-name"

// agentCase is one node agent: its service account and the Node keys its
// code writes (internal/reboot, internal/health, internal/driverentry).
type agentCase struct {
	name      string // as the policy names it
	component string // its service account's component
	// setLabels / setAnnotations it sets and removes; clearLabels /
	// clearAnnotations it only removes.
	setLabels, clearLabels, setAnnotations, clearAnnotations []string
	// notOwnedLabel / notOwnedAnnotation are contract keys of someone else.
	notOwnedLabel, notOwnedAnnotation string
	cordons                           bool
	// deletesPods: it may delete pods of its own node in the chart's
	// namespace (the driver pod); the rebooter's cordons covers its own.
	deletesPods bool
}

func agents(k contract.Keys) []agentCase {
	return []agentCase{
		{
			name: "rebooter", component: "rebooter",
			clearLabels: []string{k.RebootRequired()},
			setAnnotations: []string{k.RebootFromBootID(), k.RebootedFromBootID(), k.RebootStartedAt(), k.RebootStartedReason(), k.RebootHistory(),
				k.RecoveryCordoned(), k.RecoveryWasCordoned()},
			clearAnnotations: []string{k.RebootReason(), k.ApproveReboot()},
			notOwnedLabel:    k.DriverReady(), notOwnedAnnotation: k.UpgradeSince(),
			cordons: true,
		},
		{
			name: "driver pod", component: "driver",
			setLabels: []string{k.DriverVersion(), k.DriverReady(), k.RebootRequired()},
			// reboot-history: the health-watch records a wedge that ended
			// without a reboot for the loop guard.
			// installed-version: the driver entry records a version
			// installed over the loaded one before the reboot.
			setAnnotations: []string{k.RebootReason(), k.RebootHistory(), k.InstalledDriver()},
			notOwnedLabel:  k.UpgradeState(), notOwnedAnnotation: k.RebootStartedAt(),
			deletesPods: true,
		},
		{
			// The NRI injector says only whether the runtime serves it.
			name: "nri-injector", component: "nri-injector",
			setAnnotations: []string{k.InjectionStatus()},
			notOwnedLabel:  k.DriverReady(), notOwnedAnnotation: k.RebootReason(),
		},
	}
}

// TestNodeAgentsChangeOnlyTheirOwnNode installs the chart and, with each
// node agent's service account token bound to a pod on node A (what the
// kubelet gives the agent's pod), tries what a compromised agent would:
// change node B, change keys it does not own on A, taint or cordon A,
// delete or evict a pod on B. The chart's admission policy refuses each
// with its message; the agent's own writes on A still go through. The
// refusals are asserted by the policy's words, so without the policy's
// bindings this test fails.
func TestNodeAgentsChangeOnlyTheirOwnNode(t *testing.T) {
	ctx := ctxTimeout(t, 5*time.Minute)
	s := install(t, "policy", nil)
	nodes, err := env.AddNodes(ctx, 2, "auth", nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := nodes[0], nodes[1]
	workNS, err := env.NewNamespace(ctx, "auth-work")
	if err != nil {
		t.Fatal(err)
	}
	waitPolicyActive(ctx, t, s, a, b)

	for _, ag := range agents(s.keys) {
		t.Run(ag.component, func(t *testing.T) {
			agentPod := createPod(t, s.ns, ag.component+"-on-a", a, s.sa(ag.component))
			tok := token(t, s.ns, s.sa(ag.component), agentPod)
			c := clientAs(t, tok)
			claimIs(ctx, t, c, a)
			k := s.keys
			someKey := firstOf(ag.setAnnotations, ag.setLabels)

			// Another node: refused whatever the key.
			wantForbidden(t, "owned key on node B", patchAs(ctx, c, b, ownedChange(ag, someKey)),
				"may change only Node "+a+", not Node "+b, "the "+ag.name, s.username(ag.component))
			// Keys of the contract it does not write, and keys of nobody's.
			wantForbidden(t, "label "+ag.notOwnedLabel, patchAs(ctx, c, a, kube.NodeChange{Labels: map[string]*string{ag.notOwnedLabel: kube.Set("x")}}),
				"may not change label(s) "+ag.notOwnedLabel+" of Node "+a)
			wantForbidden(t, "annotation "+ag.notOwnedAnnotation, patchAs(ctx, c, a, kube.NodeChange{Annotations: map[string]*string{ag.notOwnedAnnotation: kube.Set("x")}}),
				"may not change annotation(s) "+ag.notOwnedAnnotation+" of Node "+a)
			wantForbidden(t, "state label", patchAs(ctx, c, a, kube.NodeChange{Labels: map[string]*string{k.UpgradeState(): kube.Set(string(contract.StateUpgradeRequired))}}),
				"may not change label(s) "+k.UpgradeState())
			wantForbidden(t, "foreign label", patchAs(ctx, c, a, kube.NodeChange{Labels: map[string]*string{"example.com/team": kube.Set("x")}}),
				"may not change label(s) example.com/team")
			wantForbidden(t, "the NPU label", patchAs(ctx, c, a, kube.NodeChange{Labels: map[string]*string{contract.LabelNPUPresent: kube.Set(contract.True)}}),
				"may not change label(s) "+contract.LabelNPUPresent)
			// Another installation's domain.
			wantForbidden(t, "default-domain key", patchAs(ctx, c, a, kube.NodeChange{Labels: map[string]*string{contract.Keys{Domain: contract.DefaultDomain}.DriverReady(): kube.Set("true")}}),
				"may not change label(s) "+contract.DefaultDomain+"/driver-ready")
			// Taints and finalizers: only labels and annotations.
			wantForbidden(t, "taint", rawPatch(ctx, c, a, map[string]any{"spec": map[string]any{"taints": []any{map[string]any{"key": "x", "effect": "NoExecute"}}}}),
				"may change only labels and annotations of Node "+a)
			wantForbidden(t, "finalizer", rawPatch(ctx, c, a, map[string]any{"metadata": map[string]any{"finalizers": []any{"example.com/keep"}}}),
				"may change only labels and annotations of Node "+a)

			// Its own keys on its own node: set and removed, one request
			// each, at a resourceVersion as the agents write.
			for _, key := range append(slices.Clone(ag.setLabels), ag.setAnnotations...) {
				wantAllowed(t, "set "+key, patchAs(ctx, c, a, ownedChange(ag, key)))
				wantAllowed(t, "remove "+key, patchAs(ctx, c, a, removeChange(ag, key)))
			}
			// Keys it only removes (the marker of a completed reboot, the
			// approval it consumed): never set by it.
			for _, key := range append(slices.Clone(ag.clearLabels), ag.clearAnnotations...) {
				wantForbidden(t, "set "+key, patchAs(ctx, c, a, ownedChange(ag, key)), "of Node "+a, "only removes")
				adminSet(ctx, t, a, ownedChange(ag, key))
				wantAllowed(t, "remove "+key, patchAs(ctx, c, a, removeChange(ag, key)))
			}

			if ag.cordons {
				// The rebooter's recovery cordon and uncordon, as it writes them.
				wantForbidden(t, "cordon without the recovery bookkeeping", patchAs(ctx, c, a, kube.NodeChange{Unschedulable: ptrTo(true)}),
					"cordon Node "+a+" only for a recovery reboot")
				wantAllowed(t, "recovery cordon", patchAs(ctx, c, a, kube.NodeChange{Unschedulable: ptrTo(true),
					Annotations: map[string]*string{k.RecoveryCordoned(): kube.Set(contract.True), k.RecoveryWasCordoned(): nil}}))
				wantAllowed(t, "recovery uncordon", patchAs(ctx, c, a, kube.NodeChange{Unschedulable: ptrTo(false),
					Annotations: map[string]*string{k.RecoveryCordoned(): nil, k.RecoveryWasCordoned(): nil}}))
				// A node an admin cordoned stays cordoned.
				adminSet(ctx, t, a, kube.NodeChange{Unschedulable: ptrTo(true)})
				wantForbidden(t, "uncordon of an admin's cordon", patchAs(ctx, c, a, kube.NodeChange{Unschedulable: ptrTo(false)}),
					"uncordon Node "+a+" only after its own recovery cordon", "kubectl uncordon "+a)
				adminSet(ctx, t, a, kube.NodeChange{Unschedulable: ptrTo(false)})
			} else {
				wantForbidden(t, "cordon", patchAs(ctx, c, a, kube.NodeChange{Unschedulable: ptrTo(true)}),
					"may change only labels and annotations of Node "+a)
			}

			// Pods: on its own node only (the rebooter); the driver pod
			// deletes none outside the chart's namespace (RBAC: a Role for
			// the device-plugin pod of its wedged node). Nobody evicts: an
			// eviction names no node for the policy to check.
			onB := createPod(t, workNS, ag.component+"-victim-b", b, "")
			onA := createPod(t, workNS, ag.component+"-victim-a", a, "")
			if ag.cordons {
				wantForbidden(t, "delete a pod on B", c.CoreV1().Pods(workNS).Delete(ctx, onB.Name, metav1.DeleteOptions{}),
					"may delete only pods on node "+a+", not pod "+workNS+"/"+onB.Name+" (on node "+b+")")
				wantAllowed(t, "delete a pod on A", c.CoreV1().Pods(workNS).Delete(ctx, onA.Name, metav1.DeleteOptions{}))
			} else {
				wantForbidden(t, "delete a pod on B", c.CoreV1().Pods(workNS).Delete(ctx, onB.Name, metav1.DeleteOptions{}), "cannot delete resource \"pods\"")
				wantForbidden(t, "delete a pod on A", c.CoreV1().Pods(workNS).Delete(ctx, onA.Name, metav1.DeleteOptions{}), "cannot delete resource \"pods\"")
			}
			if ag.deletesPods {
				// In the chart's namespace (the device-plugin pods): on
				// its own node only, by the policy.
				pluginB := createPod(t, s.ns, ag.component+"-plugin-b", b, "")
				pluginA := createPod(t, s.ns, ag.component+"-plugin-a", a, "")
				wantForbidden(t, "delete the device-plugin pod on B", c.CoreV1().Pods(s.ns).Delete(ctx, pluginB.Name, metav1.DeleteOptions{}),
					"may delete only pods on node "+a+", not pod "+s.ns+"/"+pluginB.Name+" (on node "+b+")")
				wantAllowed(t, "delete the device-plugin pod on A", c.CoreV1().Pods(s.ns).Delete(ctx, pluginA.Name, metav1.DeleteOptions{}))
			} else if !ag.cordons {
				pluginA := createPod(t, s.ns, ag.component+"-plugin-a", a, "")
				wantForbidden(t, "delete a chart pod on A", c.CoreV1().Pods(s.ns).Delete(ctx, pluginA.Name, metav1.DeleteOptions{}), "cannot delete resource \"pods\"")
			}
			wantForbidden(t, "evict a pod on B", c.PolicyV1().Evictions(workNS).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: onB.Name, Namespace: workNS}}),
				"cannot create resource \"pods/eviction\"")
			if p, err := env.Client.CoreV1().Pods(workNS).Get(ctx, onB.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
				t.Errorf("the pod on node B was removed (%v)", err)
			}

			// A token of the same service account that is bound to no pod
			// names no node: refused on every node.
			unbound := clientAs(t, token(t, s.ns, s.sa(ag.component), nil))
			wantForbidden(t, "unbound token", patchAs(ctx, unbound, a, ownedChange(ag, someKey)),
				"carries no "+nodeNameClaim+" claim")
		})
	}

	t.Run("others are not matched", func(t *testing.T) {
		// An admin and the rollout (cluster-wide by design) change any
		// node and any key.
		rollout := clientAs(t, token(t, s.ns, s.sa("rollout"), nil))
		wantAllowed(t, "rollout sets a state label on B", patchAs(ctx, rollout, b, kube.NodeChange{
			Labels: map[string]*string{s.keys.UpgradeState(): kube.Set(string(contract.StateUpgradeRequired))}, Unschedulable: ptrTo(true)}))
		wantAllowed(t, "rollout removes it", patchAs(ctx, rollout, b, kube.NodeChange{Labels: map[string]*string{s.keys.UpgradeState(): nil}, Unschedulable: ptrTo(false)}))
		onB := createPod(t, workNS, "rollout-victim-b", b, "")
		wantAllowed(t, "rollout deletes a pod on B", rollout.CoreV1().Pods(workNS).Delete(ctx, onB.Name, metav1.DeleteOptions{}))
		wantAllowed(t, "admin taints B", rawPatch(ctx, env.Client, b, map[string]any{"spec": map[string]any{"taints": []any{map[string]any{"key": "x", "effect": "NoSchedule"}}}}))
		wantAllowed(t, "admin untaints B", rawPatch(ctx, env.Client, b, map[string]any{"spec": map[string]any{"taints": nil}}))
	})
}

// waitPolicyActive waits until the API server enforces the chart's policy
// (it loads policies from a watch, shortly after they are created) and
// checks that the type checker found nothing to warn about.
//
// Polling: whether admission enforces a policy is not an object anything
// could watch. The probe is a dry run, which admission judges like the
// real request without storing anything.
func waitPolicyActive(ctx context.Context, t *testing.T, s *stack, a, b string) {
	t.Helper()
	pod := createPod(t, s.ns, "probe-on-a", a, s.sa("rebooter"))
	c := clientAs(t, token(t, s.ns, s.sa("rebooter"), pod))
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{s.keys.RebootHistory(): "probe"}}})
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = c.CoreV1().Nodes().Patch(ctx, b, types.MergePatchType, body, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && apierrors.IsForbidden(last), nil
	})
	if err != nil {
		t.Fatalf("the node-agent policy is not enforced a minute after the install: the rebooter's dry-run patch of node %s gives %q", b, errString(last))
	}
	if err := env.Client.CoreV1().Pods(s.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{s.fullname + "-node-agents", s.fullname + "-node-agents-pods"} {
		lw := cache.NewListWatchFromClient(env.Client.AdmissionregistrationV1().RESTClient(), "validatingadmissionpolicies", "", fields.OneTermEqualSelector("metadata.name", name))
		err := testbed.WaitFor(ctx, lw, &admissionregistrationv1.ValidatingAdmissionPolicy{}, func(ps []*admissionregistrationv1.ValidatingAdmissionPolicy) (bool, error) {
			return len(ps) == 1 && ps[0].Status.ObservedGeneration == ps[0].Generation && ps[0].Status.TypeChecking != nil, nil
		})
		if err != nil {
			t.Fatalf("policy %s not type-checked: %v", name, err)
		}
		p, err := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range p.Status.TypeChecking.ExpressionWarnings {
			t.Errorf("policy %s: type checking warns about %s: %s", name, w.FieldRef, w.Warning)
		}
	}
}

// claimIs checks, with SelfSubjectReview, that the API server puts the
// node of the token's pod into the user's extra.
func claimIs(ctx context.Context, t *testing.T, c kubernetes.Interface, node string) {
	t.Helper()
	r, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Status.UserInfo.Extra[nodeNameClaim]; !slices.Equal(got, []string{node}) {
		t.Fatalf("the pod-bound token's user has %s %q, want [%s] (user info %+v)", nodeNameClaim, got, node, r.Status.UserInfo)
	}
}

// patchAs writes change as the agents do (kube.PatchNodeIf: a merge patch
// at the node's current resourceVersion), again on a Conflict as they
// do: the node's heartbeats move its resourceVersion on.
func patchAs(ctx context.Context, c kubernetes.Interface, node string, change kube.NodeChange) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_, err = kube.PatchNodeIf(ctx, c, node, n.ResourceVersion, change)
		return err
	})
}

func rawPatch(ctx context.Context, c kubernetes.Interface, node string, patch map[string]any) error {
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}

func adminSet(ctx context.Context, t *testing.T, node string, change kube.NodeChange) {
	t.Helper()
	if _, err := kube.PatchNode(ctx, env.Client, node, change); err != nil {
		t.Fatal(err)
	}
}

// ownedChange sets key, as a label or an annotation of ag.
func ownedChange(ag agentCase, key string) kube.NodeChange {
	if slices.Contains(ag.setLabels, key) || slices.Contains(ag.clearLabels, key) {
		return kube.NodeChange{Labels: map[string]*string{key: kube.Set(contract.True)}}
	}
	return kube.NodeChange{Annotations: map[string]*string{key: kube.Set(contract.True)}}
}

func removeChange(ag agentCase, key string) kube.NodeChange {
	if slices.Contains(ag.setLabels, key) || slices.Contains(ag.clearLabels, key) {
		return kube.NodeChange{Labels: map[string]*string{key: nil}}
	}
	return kube.NodeChange{Annotations: map[string]*string{key: nil}}
}

func firstOf(lists ...[]string) string {
	for _, l := range lists {
		if len(l) > 0 {
			return l[0]
		}
	}
	return ""
}

func ptrTo[T any](v T) *T { return &v }
