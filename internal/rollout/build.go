package rollout

import (
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// Inputs are the cluster objects a snapshot is built from.
type Inputs struct {
	// Nodes are the NPU nodes (selected by npuNodeSelector).
	Nodes []*corev1.Node
	Pods  []*CachedPod
	// Drivers are the driver DaemonSets, one per profile.
	Drivers []*appsv1.DaemonSet
	Targets []ResolvedTarget
	Missing []string
	Busy    map[string]string
	// Returned and ObservedSince are the observer's (Snapshot).
	Returned      Return
	ObservedSince time.Time
	// Seen are the observer's times per node (observe.go); nil for a
	// one-off decision, which reads every timeout as just started.
	Seen map[string]Seen
}

// View are the parts of the policy that shape the snapshot.
type View struct {
	Keys         contract.Keys
	Canary       labels.Selector
	WaitSelector labels.Selector
}

// BuildSnapshot turns cluster objects into the view Decide works on.
func BuildSnapshot(in Inputs, v View) Snapshot {
	return newViewer(in, v).snapshot()
}

// viewer builds node views from one set of inputs; the pods are indexed
// once, so re-viewing a few changed nodes costs only those nodes.
type viewer struct {
	in         Inputs
	v          View
	k          viewKeys
	podsByNode map[string][]*CachedPod
	targetOf   map[string]string // DaemonSet UID → target name
	driverSel  []labels.Selector // the node selector of each of in.Drivers
}

// viewKeys are the contract's names a node view reads, spelled once per
// decision instead of once per node and read.
type viewKeys struct {
	state, skip, driverVersion, driverReady, rebootRequired        string
	since, bootID, target, rebootReason, rebootStarted, approve    string
	rebootFrom, installed, installStatus, injection, rebootHold    string
	failureReason, failureStep, rerolled, wasCordoned, specVersion string
}

func newViewKeys(k contract.Keys) viewKeys {
	return viewKeys{
		state: k.UpgradeState(), skip: k.UpgradeSkip(), driverVersion: k.DriverVersion(), driverReady: k.DriverReady(),
		rebootRequired: k.RebootRequired(), since: k.UpgradeSince(), bootID: k.UpgradeBootID(), target: k.UpgradeTarget(),
		rebootReason: k.RebootReason(), rebootStarted: k.RebootStartedAt(), approve: k.ApproveReboot(),
		failureReason: k.UpgradeFailureReason(), failureStep: k.UpgradeFailureStep(), rerolled: k.UpgradeRerolled(),
		wasCordoned: k.UpgradeWasCordoned(), specVersion: k.DriverSpecVersion(), installed: k.InstalledDriver(), installStatus: k.InstallStatus(),
		rebootFrom: k.RebootFromBootID(), injection: k.InjectionStatus(), rebootHold: k.RebootHold(),
	}
}

func newViewer(in Inputs, v View) *viewer {
	w := &viewer{in: in, v: v, k: newViewKeys(v.Keys), podsByNode: make(map[string][]*CachedPod, len(in.Nodes)), targetOf: map[string]string{}}
	for _, p := range in.Pods {
		if p.NodeName != "" {
			w.podsByNode[p.NodeName] = append(w.podsByNode[p.NodeName], p)
		}
	}
	for _, t := range in.Targets {
		for _, ds := range t.DaemonSets {
			w.targetOf[string(ds.UID)] = t.Name
		}
	}
	for _, ds := range in.Drivers {
		w.driverSel = append(w.driverSel, labels.SelectorFromSet(ds.Spec.Template.Spec.NodeSelector))
	}
	return w
}

// snapshot views every node, sorted by name.
func (w *viewer) snapshot() Snapshot {
	s := Snapshot{Busy: w.in.Busy, Missing: w.in.Missing, NoDriver: len(w.in.Drivers) == 0, Nodes: make([]NodeView, 0, len(w.in.Nodes)),
		Returned: w.in.Returned, ObservedSince: w.in.ObservedSince}
	for _, t := range w.in.Targets {
		s.Targets = append(s.Targets, t.Name)
	}
	for _, node := range w.in.Nodes {
		s.Nodes = append(s.Nodes, w.view(node))
	}
	sort.Slice(s.Nodes, func(i, j int) bool { return s.Nodes[i].Name < s.Nodes[j].Name })
	return s
}

func (w *viewer) view(node *corev1.Node) NodeView {
	k, v := w.k, w.v
	l, a := node.Labels, node.Annotations
	raw := l[k.state]
	st, known := contract.ParseUpgradeState(raw)
	n := NodeView{
		Name: node.Name, ResourceVersion: node.ResourceVersion,
		State: st, RawState: raw, StateKnown: known,
		Skip:           l[k.skip] == contract.True,
		Canary:         v.Canary != nil && !v.Canary.Empty() && v.Canary.Matches(labels.Set(l)),
		Unschedulable:  node.Spec.Unschedulable,
		Ready:          kube.NodeReady(node),
		BootID:         node.Status.NodeInfo.BootID,
		Loaded:         l[k.driverVersion],
		Installed:      a[k.installed],
		InstallStatus:  a[k.installStatus],
		Injection:      a[k.injection],
		DriverReady:    l[k.driverReady] == contract.True,
		Since:          parseTime(a[k.since]),
		UpgradeBootID:  a[k.bootID],
		Target:         a[k.target],
		RebootRequired: l[k.rebootRequired] == contract.True,
		RebootReason:   a[k.rebootReason],
		RebootStarted:  parseTime(a[k.rebootStarted]),
		Approved:       a[k.approve] == contract.True,
		ApprovalValue:  a[k.approve],
		FailureReason:  a[k.failureReason],
		FailureStep:    a[k.failureStep],
		Rerolled:       ParseRerolled(a[k.rerolled]),
		TargetPods:     map[string][]TargetPod{},
	}
	n.RebootFrom = a[k.rebootFrom]
	n.RebootHold = a[k.rebootHold]
	if seen, ok := w.in.Seen[node.Name]; ok {
		if seen.State == raw && seen.Since == a[k.since] {
			n.StateSeen = seen.StateAt
		}
		if n.RebootFrom != "" && seen.RebootFrom == n.RebootFrom {
			n.RebootSeen = seen.RebootAt
		}
	}
	if c, ok := a[k.wasCordoned]; ok {
		b := c == contract.True
		n.WasCordoned = &b
	}
	viewOwnership(&n, l, a, v.Keys)
	profile, err := coveringDriver(node, w.in.Drivers, w.driverSel)
	if err != nil {
		n.ProfileError = err.Error()
	} else {
		n.Profile = profile.Namespace + "/" + profile.Name
		n.Desired = profile.Spec.Template.Annotations[k.specVersion]
		if n.Desired == "" {
			n.ProfileError = fmt.Sprintf("driver DaemonSet %s has no %s annotation on its pod template; reinstall the chart", n.Profile, k.specVersion)
		}
	}
	for _, p := range w.podsByNode[node.Name] {
		if p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed {
			continue
		}
		owner := p.DaemonSet
		switch {
		case profile != nil && owner == string(profile.UID):
			n.Driver = newerDriver(n.Driver, p, k.specVersion)
		case w.targetOf[owner] != "":
			t := w.targetOf[owner]
			n.TargetPods[t] = append(n.TargetPods[t], TargetPod{
				Target: t, Namespace: p.Namespace, Name: p.Name, UID: string(p.UID),
				Started: p.Started, Ready: p.Ready, Terminating: p.DeletionTimestamp != nil,
			})
		case owner == "" && p.NPU:
			n.NPUPods++
		}
		if owner == "" && v.WaitSelector != nil && !v.WaitSelector.Empty() && v.WaitSelector.Matches(labels.Set(p.Labels)) {
			n.WaitPods++
			if len(n.WaitPodNames) < maxNamedPods {
				n.WaitPodNames = append(n.WaitPodNames, p.Namespace+"/"+p.Name)
			}
		}
	}
	return n
}

// maxNamedPods bounds the pods a note names.
const maxNamedPods = 3

// coveringDriver finds the one driver DaemonSet whose node selector (sels,
// in the order of drivers) the node matches.
func coveringDriver(node *corev1.Node, drivers []*appsv1.DaemonSet, sels []labels.Selector) (*appsv1.DaemonSet, error) {
	var match []*appsv1.DaemonSet
	for i, ds := range drivers {
		if sels[i].Matches(labels.Set(node.Labels)) {
			match = append(match, ds)
		}
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return nil, fmt.Errorf("no driver profile covers node %s (%s); add a matching entry to driver.profiles or fix the node's labels", node.Name, profileLabels(node))
	}
	names := make([]string, len(match))
	for i, ds := range match {
		names[i] = ds.Name
	}
	sort.Strings(names)
	return nil, fmt.Errorf("node %s matches several driver profiles (%s); make driver.profiles select disjoint nodes", node.Name, strings.Join(names, ", "))
}

func profileLabels(node *corev1.Node) string {
	var parts []string
	for _, key := range []string{contract.LabelChip, contract.LabelKernel, contract.LabelOS} {
		parts = append(parts, key+"="+node.Labels[key])
	}
	return strings.Join(parts, ", ")
}

func newerDriver(cur *DriverPod, p *CachedPod, specVersionKey string) *DriverPod {
	if cur != nil && p.DeletionTimestamp != nil {
		return cur
	}
	d := &DriverPod{Name: p.Name, Version: p.Annotations[specVersionKey]}
	if p.Ready && p.DeletionTimestamp == nil {
		d.Ready, d.ReadyAt = true, p.ReadyAt
	}
	return d
}

func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}
	}
	return t
}
