package rollout

import (
	appsv1 "k8s.io/api/apps/v1"

	"github.com/openfuyao/npu-stack/internal/dstarget"
)

// TargetSpec is a --reroll value: DaemonSets whose pods on a node are
// re-created after the node's driver changed.
type TargetSpec = dstarget.Spec

// ResolvedTarget is a target with the DaemonSets it names today.
type ResolvedTarget = dstarget.Resolved

// ParseTarget reads "namespace/name" or "namespace/selector:<label selector>".
func ParseTarget(s string) (TargetSpec, error) { return dstarget.Parse(s) }

// ResolveTargets matches specs against the cluster's DaemonSets; targets
// that match nothing come back in missing (reported, never fatal).
func ResolveTargets(specs []TargetSpec, all []*appsv1.DaemonSet) (found []ResolvedTarget, missing []string) {
	return dstarget.Resolve(specs, all)
}
