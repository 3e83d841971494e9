package apiload

import (
	"context"
	"fmt"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// Attribute makes the API server label the execution time of user's
// requests with a FlowSchema of their own, named as the return value
// says, so that Snapshot.Exec tells that client's share of the server's
// work apart from every other client's. The user may do anything (it is
// bound to cluster-admin, as the admin credentials it stands for) and its
// requests stay at the exempt priority level, where the admin's already
// were: they are never queued, so attributing them changes no timing.
// A client acts as user by impersonation (rest.Config.Impersonate),
// which the API server applies before it classifies a request.
func Attribute(ctx context.Context, c kubernetes.Interface, user string) (string, error) {
	name := "npu-bench-" + sanitize(user)
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("bind %s to cluster-admin: %w", user, err)
	}
	fs := &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: flowcontrolv1.PriorityLevelConfigurationNameExempt},
			// Right after the mandatory "exempt" schema (1), which
			// matches only system:masters: before every suggested one.
			MatchingPrecedence: 2,
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: user}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: []string{flowcontrolv1.VerbAll}, APIGroups: []string{flowcontrolv1.APIGroupAll},
					Resources: []string{flowcontrolv1.ResourceAll}, ClusterScope: true, Namespaces: []string{flowcontrolv1.NamespaceEvery},
				}},
				NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{
					Verbs: []string{flowcontrolv1.VerbAll}, NonResourceURLs: []string{flowcontrolv1.NonResourceAll},
				}},
			}},
		},
	}
	if _, err := c.FlowcontrolV1().FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("FlowSchema %s for %s: %w", name, user, err)
	}
	// The server's flow-control configuration controller digests the
	// schema before it writes the schema's Dangling condition: from then
	// on it classifies the user's requests with it.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, digestTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := c.FlowcontrolV1().FlowSchemas().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == flowcontrolv1.FlowSchemaConditionDangling {
				return cond.Status == flowcontrolv1.ConditionFalse, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("FlowSchema %s: the API server did not take it up (its Dangling condition is not False) within %s: %w", name, digestTimeout, err)
	}
	return name, nil
}

// digestTimeout bounds the wait for the API server to use a new
// FlowSchema (it does within a second when it is not starved).
const digestTimeout = time.Minute

// sanitize makes a user name a valid object name: lower case, with
// anything but letters, digits, '-' and '.' replaced by '-'.
func sanitize(user string) string {
	b := []byte(user)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '.':
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		default:
			b[i] = '-'
		}
	}
	return string(b)
}
