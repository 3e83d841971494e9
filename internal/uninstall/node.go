// Package uninstall takes npu-stack off a cluster (npu-hooks uninstall):
// it stops the rollout, has the driver pods remove npu-stack's files from
// their hosts as they stop, removes every key of the node contract from
// the Nodes, uncordons the nodes npu-stack cordoned and only those, and
// deletes what the release leaves behind (hook Jobs and their pods,
// Leases). PlanNode decides what happens to one Node; Run does the I/O.
package uninstall

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// NodePlan is what the cleanup does to one Node.
type NodePlan struct {
	// Labels and Annotations are the node's keys under the label domain,
	// sorted; all are removed. Keys outside it (NFD's, the admin's
	// openfuyao.com/npu.present) stay.
	Labels, Annotations []string
	// Uncordon: npu-stack holds the node's cordon (the driver upgrade or
	// a recovery reboot) and no admin had cordoned it before.
	Uncordon bool
	// Cordon says who holds a cordoned node's cordon; "" when the node is
	// schedulable.
	Cordon string
	// Note warns about a node handed back whose driver may not be usable.
	Note string
}

// Empty reports whether the node needs no write.
func (p NodePlan) Empty() bool {
	return len(p.Labels) == 0 && len(p.Annotations) == 0 && !p.Uncordon
}

// Change is the plan as one merge patch: only what changes.
func (p NodePlan) Change() kube.NodeChange {
	c := kube.NodeChange{Labels: map[string]*string{}, Annotations: map[string]*string{}}
	for _, k := range p.Labels {
		c.Labels[k] = nil
	}
	for _, k := range p.Annotations {
		c.Annotations[k] = nil
	}
	if p.Uncordon {
		c.Unschedulable = new(bool)
	}
	return c
}

// PlanNode decides what the cleanup does to n: remove every label and
// annotation under k's domain, and uncordon n if npu-stack cordoned it.
// Who cordoned a node is read from the contract's records
// (contract.CordonOwners): the rollout records at admission whether an
// admin had cordoned the node (driver-upgrade.was-cordoned), a recovery
// reboot the same when it cordons (recovery-was-cordoned, with
// recovery-cordoned while it holds the cordon). A cordon neither owner
// holds is the admin's, or someone else's: it stays.
func PlanNode(k contract.Keys, n *corev1.Node) NodePlan {
	var p NodePlan
	prefix := k.Domain + "/"
	for key := range n.Labels {
		if strings.HasPrefix(key, prefix) {
			p.Labels = append(p.Labels, key)
		}
	}
	for key := range n.Annotations {
		if strings.HasPrefix(key, prefix) {
			p.Annotations = append(p.Annotations, key)
		}
	}
	slices.Sort(p.Labels)
	slices.Sort(p.Annotations)
	if !n.Spec.Unschedulable {
		return p
	}
	owners := cordonOwners(k, n)
	holder := holderName(k, n, owners)
	switch {
	case !owners.Upgrade && !owners.Recovery:
		p.Cordon = "not cordoned by npu-stack: stays cordoned"
	case owners.ByAdmin:
		p.Cordon = "cordoned before the " + holder + " took it: stays cordoned"
	default:
		p.Uncordon = true
		p.Cordon = "cordoned by the " + holder
		if note := failedAfterReboot(k, n); note != "" {
			p.Note = note
		}
	}
	return p
}

// cordonOwners is contract.Keys.Cordon, but for the one state in which
// the rollout counts a node as its own before cordoning it: the rollout
// cordons a node in the same patch that moves it out of cordon-required,
// so in cordon-required any cordon is someone else's (an admin's after
// the admission recorded "not cordoned", or a recovery's).
func cordonOwners(k contract.Keys, n *corev1.Node) contract.CordonOwners {
	c := k.Cordon(n.Labels, n.Annotations)
	if n.Labels[k.UpgradeState()] == string(contract.StateCordonRequired) && c.Upgrade {
		c.Upgrade = false
		c.ByAdmin = c.Recovery && n.Annotations[k.RecoveryWasCordoned()] == contract.True
	}
	return c
}

func holderName(k contract.Keys, n *corev1.Node, c contract.CordonOwners) string {
	upgrade := fmt.Sprintf("driver upgrade (%s=%s)", k.UpgradeState(), n.Labels[k.UpgradeState()])
	switch {
	case c.Upgrade && c.Recovery:
		return upgrade + " and a recovery reboot"
	case c.Upgrade:
		return upgrade
	default:
		return "recovery reboot"
	}
}

// failedAfterReboot names an upgrade that failed once its reboot was
// asked for: the rollout keeps such a node cordoned for the admin because
// which driver it runs is not known. Uninstalled, nobody would look after
// it, so it is uncordoned like the others, with this warning.
func failedAfterReboot(k contract.Keys, n *corev1.Node) string {
	if n.Labels[k.UpgradeState()] != string(contract.StateFailed) {
		return ""
	}
	step := n.Annotations[k.UpgradeFailureStep()]
	if contract.FailedBeforeReboot(step) {
		return ""
	}
	return fmt.Sprintf("its driver upgrade had failed at step %q (%s): check its driver (npu-smi info on the node) before running NPU workloads on it",
		step, n.Annotations[k.UpgradeFailureReason()])
}
