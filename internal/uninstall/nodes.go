package uninstall

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/slots"
)

// listPage bounds one page of the node list: a fleet of thousands is
// read in pages rather than in one response.
const listPage = 500

// cleanNodes applies PlanNode to every Node of the cluster, not only the
// NPU nodes: a node whose NPU label was removed may still carry keys.
func (u *run) cleanNodes(ctx context.Context) error {
	opts := metav1.ListOptions{Limit: listPage}
	for {
		list, err := u.cfg.Client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list nodes: %w", err)
		}
		for i := range list.Items {
			if err := u.cleanNode(ctx, &list.Items[i]); err != nil {
				return err
			}
		}
		if list.Continue == "" {
			return nil
		}
		opts.Continue = list.Continue
	}
}

// cleanNode patches one node, conditionally on the version it decided on:
// a node changed meanwhile (its kubelet's status) is read and decided
// again.
func (u *run) cleanNode(ctx context.Context, n *corev1.Node) error {
	plan := PlanNode(u.cfg.Keys, n)
	if plan.Empty() {
		return nil
	}
	if u.cfg.DryRun {
		u.record(n.Name, plan)
		u.printf("node %s: %s", n.Name, describe(plan, "would remove", "would uncordon"))
		return nil
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if plan.Empty() {
			return nil
		}
		_, err := kube.PatchNodeIf(ctx, u.cfg.Client, n.Name, n.ResourceVersion, plan.Change())
		if !apierrors.IsConflict(err) {
			return err
		}
		fresh, gerr := u.cfg.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		n, plan = fresh, PlanNode(u.cfg.Keys, fresh)
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil // the node left the cluster meanwhile
	}
	if err != nil {
		return fmt.Errorf("remove npu-stack's keys from node %s: %w; run npu-hooks uninstall again", n.Name, err)
	}
	if plan.Empty() {
		return nil
	}
	u.record(n.Name, plan)
	u.printf("node %s: %s", n.Name, describe(plan, "removed", "uncordoned"))
	if plan.Note != "" {
		u.printf("node %s: warning: %s", n.Name, plan.Note)
	}
	return nil
}

func (u *run) record(node string, p NodePlan) {
	u.report.Cleaned = append(u.report.Cleaned, node)
	switch {
	case p.Uncordon:
		u.report.Uncordoned = append(u.report.Uncordoned, node)
	case p.Cordon != "":
		u.report.KeptCordoned = append(u.report.KeptCordoned, node)
	}
}

// describe is one node's line: the keys, then the cordon.
func describe(p NodePlan, remove, uncordon string) string {
	var parts []string
	if n := len(p.Labels) + len(p.Annotations); n > 0 {
		parts = append(parts, fmt.Sprintf("%s %d labels and %d annotations of npu-stack", remove, len(p.Labels), len(p.Annotations)))
	}
	switch {
	case p.Uncordon:
		parts = append(parts, uncordon+" ("+p.Cordon+")")
	case p.Cordon != "":
		parts = append(parts, p.Cordon)
	}
	return strings.Join(parts, "; ")
}

// deleteSlots deletes the rebooters' reboot-slot Leases: the rebooters
// are gone, and a slot a rebooter held when it stopped would otherwise
// stay until the namespace goes.
func (u *run) deleteSlots(ctx context.Context) error {
	ns := u.cfg.Namespace
	leases := u.cfg.Client.CoordinationV1().Leases(ns)
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: slots.Selector().String()})
	if err != nil {
		return fmt.Errorf("list the reboot-slot Leases in %s: %w", ns, err)
	}
	for _, l := range list.Items {
		if err := u.act(ctx, "delete", "deleted", u.ref("Lease", l.Name), func(ctx context.Context) error {
			return ignoreNotFound(leases.Delete(ctx, l.Name, metav1.DeleteOptions{}), "delete Lease "+ns+"/"+l.Name)
		}); err != nil {
			return err
		}
	}
	return nil
}
