// Package dstarget names DaemonSets by a flag value, "namespace/name" or
// "namespace/selector:<label selector>": the rollout's re-roll targets
// (--reroll) and the driver pod's stop targets (--stop) use the same
// syntax, rendered by the chart from the same values.
package dstarget

import (
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Spec is one parsed value: one DaemonSet by name, or every DaemonSet of
// the namespace whose labels match Selector.
type Spec struct {
	Namespace string
	Name      string
	Selector  labels.Selector
	raw       string
}

func (t Spec) String() string { return t.raw }

// Matches reports whether ds is one of the DaemonSets t names.
func (t Spec) Matches(ds *appsv1.DaemonSet) bool {
	if ds.Namespace != t.Namespace {
		return false
	}
	return t.Name != "" && ds.Name == t.Name || t.Selector != nil && t.Selector.Matches(labels.Set(ds.Labels))
}

// Parse reads "namespace/name" or "namespace/selector:<label selector>".
func Parse(s string) (Spec, error) {
	ns, rest, ok := strings.Cut(s, "/")
	if !ok || ns == "" || rest == "" {
		return Spec{}, fmt.Errorf("DaemonSet target %q: want namespace/name or namespace/selector:<label selector>", s)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return Spec{}, fmt.Errorf("DaemonSet target %q: namespace %q: %s", s, ns, strings.Join(errs, "; "))
	}
	t := Spec{Namespace: ns, raw: s}
	if sel, ok := strings.CutPrefix(rest, "selector:"); ok {
		parsed, err := labels.Parse(sel)
		if err != nil || parsed.Empty() {
			return Spec{}, fmt.Errorf("DaemonSet target %q: invalid or empty label selector %q", s, sel)
		}
		t.Selector = parsed
		return t, nil
	}
	if errs := validation.IsDNS1123Subdomain(rest); len(errs) > 0 {
		return Spec{}, fmt.Errorf("DaemonSet target %q: DaemonSet name %q: %s", s, rest, strings.Join(errs, "; "))
	}
	t.Name = rest
	return t, nil
}

// Resolved is a target with the DaemonSets it names today.
type Resolved struct {
	Name       string
	DaemonSets []*appsv1.DaemonSet
}

// Resolve matches specs against the cluster's DaemonSets; targets that
// match nothing come back in missing (reported, never fatal).
func Resolve(specs []Spec, all []*appsv1.DaemonSet) (found []Resolved, missing []string) {
	for _, sp := range specs {
		r := Resolved{Name: sp.String()}
		for _, ds := range all {
			if sp.Matches(ds) {
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
