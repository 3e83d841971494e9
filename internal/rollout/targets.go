package rollout

import (
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// TargetSpec is a --reroll value: DaemonSets whose pods on a node are
// re-created after the node's driver changed.
type TargetSpec struct {
	Namespace string
	Name      string          // one DaemonSet by name, or
	Selector  labels.Selector // every DaemonSet matching
	raw       string
}

func (t TargetSpec) String() string { return t.raw }

// ParseTarget reads "namespace/name" or "namespace/selector:<label selector>".
func ParseTarget(s string) (TargetSpec, error) {
	ns, rest, ok := strings.Cut(s, "/")
	if !ok || ns == "" || rest == "" {
		return TargetSpec{}, fmt.Errorf("re-roll target %q: want namespace/name or namespace/selector:<label selector>", s)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return TargetSpec{}, fmt.Errorf("re-roll target %q: namespace %q: %s", s, ns, strings.Join(errs, "; "))
	}
	t := TargetSpec{Namespace: ns, raw: s}
	if sel, ok := strings.CutPrefix(rest, "selector:"); ok {
		parsed, err := labels.Parse(sel)
		if err != nil || parsed.Empty() {
			return TargetSpec{}, fmt.Errorf("re-roll target %q: invalid or empty label selector %q", s, sel)
		}
		t.Selector = parsed
		return t, nil
	}
	if errs := validation.IsDNS1123Subdomain(rest); len(errs) > 0 {
		return TargetSpec{}, fmt.Errorf("re-roll target %q: DaemonSet name %q: %s", s, rest, strings.Join(errs, "; "))
	}
	t.Name = rest
	return t, nil
}

// ResolvedTarget is a target with the DaemonSets it names today.
type ResolvedTarget struct {
	Name       string
	DaemonSets []*appsv1.DaemonSet
}

// ResolveTargets matches specs against the cluster's DaemonSets; targets
// that match nothing come back in missing (reported, never fatal).
func ResolveTargets(specs []TargetSpec, all []*appsv1.DaemonSet) (found []ResolvedTarget, missing []string) {
	for _, sp := range specs {
		r := ResolvedTarget{Name: sp.String()}
		for _, ds := range all {
			if ds.Namespace != sp.Namespace {
				continue
			}
			if sp.Name != "" && ds.Name == sp.Name || sp.Selector != nil && sp.Selector.Matches(labels.Set(ds.Labels)) {
				r.DaemonSets = append(r.DaemonSets, ds)
			}
		}
		if len(r.DaemonSets) == 0 {
			missing = append(missing, sp.String())
			continue
		}
		sort.Slice(r.DaemonSets, func(i, j int) bool { return r.DaemonSets[i].Name < r.DaemonSets[j].Name })
		found = append(found, r)
	}
	return found, missing
}
