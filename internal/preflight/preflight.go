// Package preflight refuses, before Helm changes anything, an install or
// upgrade that would get stuck: NPU nodes no driver profile covers, driver
// images that do not exist or lack what their profile's install mode needs
// (or hold another driver version), an unavailability budget already
// spent, and NPU pods the rollout would not be allowed to evict.
package preflight

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/drivertree"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/rollout"
)

// Profile is one entry of driver.profiles as the chart passes it.
type Profile struct {
	Name         string            `json:"name"`
	Chip         string            `json:"chip"`
	Kernel       string            `json:"kernel"`
	OS           string            `json:"os"`
	NodeSelector map[string]string `json:"nodeSelector"`
	Image        string            `json:"image"`
	// InstallMode is driver.profiles[].installMode: what the image must
	// hold (drivertree.Required); "" is drivertree.ModeRun.
	InstallMode string `json:"installMode,omitempty"`
}

// ParseProfile reads a --profile value (JSON).
func ParseProfile(s string) (Profile, error) {
	var p Profile
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("profile %s: not a profile object: %w", s, err)
	}
	if p.Name == "" || p.Chip == "" || p.Kernel == "" || p.OS == "" {
		return p, fmt.Errorf("profile %s: name, chip, kernel and os are required", s)
	}
	if p.InstallMode != "" && p.InstallMode != drivertree.ModeRun && p.InstallMode != drivertree.ModeTree {
		return p, fmt.Errorf("profile %s: installMode %q: want %q or %q", s, p.InstallMode, drivertree.ModeRun, drivertree.ModeTree)
	}
	return p, nil
}

// ProfileLabels are the node label keys a profile's chip, kernel and os
// are matched against (driver.profileLabels).
type ProfileLabels struct{ Chip, Kernel, OS string }

// Selector is the node selector of p's driver DaemonSet.
func (p Profile) Selector(l ProfileLabels) labels.Selector {
	set := labels.Set{l.Chip: p.Chip, l.Kernel: p.Kernel, l.OS: p.OS}
	for k, v := range p.NodeSelector {
		set[k] = v
	}
	return labels.SelectorFromSet(set)
}

// Input is what the checks look at.
type Input struct {
	Keys          contract.Keys
	DriverEnabled bool
	DriverVersion string
	Profiles      []Profile
	ProfileLabels ProfileLabels
	// Nodes are the NPU nodes.
	Nodes          []*corev1.Node
	MaxUnavailable intstr.IntOrString
	// Evictable reports why the pods on a node could not be evicted by
	// the rollout's pod-deletion (and drain) step; nil = they can.
	Evictable func(ctx context.Context, node string) error
	// Images checks that an image exists; nil skips the check.
	Images ImageChecker
	// Contents reads what an existing image holds, checked against
	// its profile's install mode; nil skips the check.
	Contents ContentChecker
	// DriverInstaller is driver.installCommand[0], DriverImageTree
	// driver.imageTreePath: where the image holds the installer (mode
	// run) or the driver tree (mode tree).
	DriverInstaller, DriverImageTree string
}

// Problem is one reason to refuse.
type Problem struct {
	Object string // node/..., profile/...
	Msg    string
}

func (p Problem) String() string { return p.Object + ": " + p.Msg }

// Result lists every problem found, not just the first, so one run tells
// the admin everything to fix.
type Result struct {
	Problems []Problem
	// ToUpgrade are the nodes whose loaded driver differs from the new one.
	ToUpgrade []string
	// Warnings are worth a look but no reason to refuse.
	Warnings []Problem
}

// VendorDriverRepository is where the precompiled driver images are
// published (the Alauda NPU Operator v1.2.4 documentation copies them from
// there; docs/host-contract.md, ANO-UPG).
const VendorDriverRepository = "docker.io/alaudadockerhub/ascend-driver"

// imageProblem says what to do about a driver image that cannot be pulled:
// copy it (every architecture) from the vendor, or fix the values.
func imageProblem(image string, err error) string {
	tag := image[strings.LastIndex(image, ":")+1:]
	copyCmd := fmt.Sprintf("skopeo copy --all docker://%s:%s docker://%s", VendorDriverRepository, tag, image)
	var terr *transport.Error
	switch {
	case errors.Is(err, ErrMissingArch):
		return fmt.Sprintf("driver image %s cannot run on this profile's nodes: %v; copy every architecture with `%s`", image, err, copyCmd)
	case errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound:
		return fmt.Sprintf("driver image %s is not in the registry (%v); copy it for every architecture with `%s`, or fix driver.version, driver.image or driver.tagTemplate", image, err, copyCmd)
	default:
		return fmt.Sprintf("driver image %s cannot be checked: %v; fix the registry or imagePullSecrets, or set hooks.preflight.skipImageCheck=true to skip the check", image, err)
	}
}

// Run performs every check.
func Run(ctx context.Context, in Input) (Result, error) {
	var r Result
	if !in.DriverEnabled {
		return r, nil // passthrough driver: nothing to install or roll
	}
	covering := map[string][]string{} // node → profiles
	archs := map[string][]string{}    // profile → its nodes' architectures
	used := map[string]bool{}
	for _, n := range in.Nodes {
		for _, p := range in.Profiles {
			if p.Selector(in.ProfileLabels).Matches(labels.Set(n.Labels)) {
				covering[n.Name] = append(covering[n.Name], p.Name)
				used[p.Name] = true
				if a := n.Labels[corev1.LabelArchStable]; a != "" && !slices.Contains(archs[p.Name], a) {
					archs[p.Name] = append(archs[p.Name], a)
				}
			}
		}
		switch c := covering[n.Name]; len(c) {
		case 0:
			r.Problems = append(r.Problems, Problem{"node/" + n.Name, fmt.Sprintf(
				"no driver profile covers it (%s=%q, %s=%q, %s=%q); add a matching entry to driver.profiles, fix the node's labels, or remove it from npuNodeSelector%s",
				in.ProfileLabels.Chip, n.Labels[in.ProfileLabels.Chip], in.ProfileLabels.Kernel, n.Labels[in.ProfileLabels.Kernel], in.ProfileLabels.OS, n.Labels[in.ProfileLabels.OS],
				kernelHint(n.Labels, in.Profiles, in.ProfileLabels))})
		case 1:
		default:
			r.Problems = append(r.Problems, Problem{"node/" + n.Name, fmt.Sprintf(
				"covered by several driver profiles (%s); give the profiles nodeSelectors that do not overlap", strings.Join(c, ", "))})
		}
	}
	if in.Images != nil {
		for _, p := range in.Profiles {
			if !used[p.Name] {
				continue // no node uses it: its image is never pulled
			}
			a := archs[p.Name]
			slices.Sort(a)
			if err := in.Images.Check(ctx, p.Image, a); err != nil {
				r.Problems = append(r.Problems, Problem{"profile/" + p.Name, imageProblem(p.Image, err)})
				continue
			}
			if in.Contents != nil {
				probs, warns := checkContents(ctx, in, p, a)
				r.Problems, r.Warnings = append(r.Problems, probs...), append(r.Warnings, warns...)
			}
		}
	}
	r.Problems = append(r.Problems, budgetAndWorkloads(ctx, in, &r)...)
	sort.SliceStable(r.Problems, func(i, j int) bool { return r.Problems[i].Object < r.Problems[j].Object })
	sort.SliceStable(r.Warnings, func(i, j int) bool { return r.Warnings[i].Object < r.Warnings[j].Object })
	return r, nil
}

// checkContents reads what p's image holds for the architectures a and
// judges it against p's install mode.
func checkContents(ctx context.Context, in Input, p Profile, a []string) (probs, warns []Problem) {
	obj := "profile/" + p.Name
	need := Need{Mode: p.InstallMode, Installer: in.DriverInstaller, Tree: in.DriverImageTree, Version: in.DriverVersion}
	probes, err := need.Probes()
	if err != nil {
		return []Problem{{obj, fmt.Sprintf("%v; set driver.installCommand, or the profile's installMode", err)}}, nil
	}
	ans, err := in.Contents.Contents(ctx, p.Image, a, probes)
	if err != nil {
		return []Problem{{obj, contentsProblem(p.Image, err)}}, nil
	}
	for _, platform := range slices.Sorted(maps.Keys(ans)) {
		for _, msg := range need.Judge(p.Image, platform, ans[platform]) {
			probs = append(probs, Problem{obj, msg})
		}
		if w := need.NameWarning(p.Image, platform, ans[platform]); w != "" {
			warns = append(warns, Problem{obj, w})
		}
	}
	return probs, warns
}

// contentsProblem says what to do about an image whose layers could not
// be read.
func contentsProblem(image string, err error) string {
	if errors.Is(err, ErrContentTimeout) {
		return fmt.Sprintf("driver image %s: %v; raise hooks.preflight.imageContentTimeoutSeconds (helm's --timeout bounds the whole hook: raise it too), or set hooks.preflight.skipImageContentCheck=true to skip reading the image", image, err)
	}
	return fmt.Sprintf("driver image %s cannot be read: %v; fix the registry or imagePullSecrets, or set hooks.preflight.skipImageContentCheck=true to skip reading the image", image, err)
}

func budgetAndWorkloads(ctx context.Context, in Input, r *Result) []Problem {
	var probs []Problem
	var unavailable []string
	startable := 0
	for _, n := range in.Nodes {
		loaded := n.Labels[in.Keys.DriverVersion()]
		// A node the rollout itself has cordoned is in flight and frees
		// its share of the budget when done: not a reason to get stuck.
		st, _ := contract.ParseUpgradeState(n.Labels[in.Keys.UpgradeState()])
		down := (n.Spec.Unschedulable || !kube.NodeReady(n)) && !st.InProgress()
		if down {
			unavailable = append(unavailable, n.Name)
		}
		if loaded == "" || loaded == in.DriverVersion || n.Labels[in.Keys.UpgradeSkip()] == contract.True {
			continue
		}
		r.ToUpgrade = append(r.ToUpgrade, n.Name)
		if !down {
			startable++
		}
		if in.Evictable != nil {
			if err := in.Evictable(ctx, n.Name); err != nil {
				probs = append(probs, Problem{"node/" + n.Name, fmt.Sprintf("NPU workloads cannot be stopped for the upgrade: %v", err)})
			}
		}
	}
	if startable == 0 {
		return probs
	}
	budget, err := rollout.ResolveMaxUnavailable(in.MaxUnavailable, len(in.Nodes))
	if err != nil {
		return append(probs, Problem{"policy/maxUnavailable", err.Error()})
	}
	if len(unavailable) >= budget {
		sort.Strings(unavailable)
		probs = append(probs, Problem{"policy/maxUnavailable", fmt.Sprintf(
			"budget already spent: maxUnavailable %s allows %d of %d NPU nodes, and %d are cordoned or NotReady (%s); uncordon or repair them, or raise driver.upgradePolicy.maxUnavailable",
			in.MaxUnavailable.String(), budget, len(in.Nodes), len(unavailable), strings.Join(unavailable, ", "))})
	}
	return probs
}
