package rollout

import (
	"sort"
	"strings"
	"time"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// ActionKind is what the controller must do.
type ActionKind string

const (
	// ActTransition patches the node (state label, bookkeeping, cordon),
	// conditional on the node's resourceVersion, and records events.
	ActTransition ActionKind = "transition"
	// ActEvict removes pods from the node (NPU pods, or a full drain) and
	// then applies Then; a failure fails the node at Step.
	ActEvict ActionKind = "evict"
	// ActDeletePods deletes re-roll target pods, after recording their
	// UIDs on the node (Change) so a restarted rollout knows.
	ActDeletePods ActionKind = "delete-pods"
)

// EvictKind distinguishes the two eviction steps.
type EvictKind string

const (
	EvictNPUPods EvictKind = "npu-pods"
	EvictDrain   EvictKind = "drain"
)

// Action is one step Decide asks for.
type Action struct {
	Kind ActionKind
	Node string
	// ResourceVersion is the node version the decision was taken on; the
	// patch is refused if the node changed since.
	ResourceVersion string
	From, To        contract.UpgradeState
	// Via are the states a chained transition passes through between From
	// and To (see DecideChained).
	Via    []contract.UpgradeState
	Change kube.NodeChange
	// Message explains the action, for logs and the NPUDriverUpgrade event.
	Message string
	// Events beyond NPUDriverUpgrade (RebootRequired, UpgradeFailed).
	Events []Event

	Evict EvictKind
	Step  string
	Then  *Action

	Pods []TargetPod
}

// Event is an event the controller records on the node.
type Event struct {
	Reason  contract.EventReason
	Warning bool
	Message string
}

// Steps named in upgrade-failed annotations.
const (
	StepWaitForJobs = contract.StepWaitForJobs
	StepPodDeletion = contract.StepPodDeletion
	StepDrain       = contract.StepDrain
	StepReboot      = "reboot"
	StepValidation  = "validation"
	StepState       = "state"
)

// builder writes node changes with the keys of one label domain.
type builder struct {
	k   contract.Keys
	now time.Time
	// win is the upgrade windows at now (zero: none, always open).
	win windowView
}

func (b builder) transition(n NodeView, to contract.UpgradeState, msg string) Action {
	ch := kube.NodeChange{
		Labels:      map[string]*string{},
		Annotations: map[string]*string{},
	}
	if to == contract.StateDone {
		ch.Labels[b.k.UpgradeState()] = nil
		for _, a := range b.bookkeeping() {
			ch.Annotations[a] = nil
		}
	} else {
		ch.Labels[b.k.UpgradeState()] = kube.Set(string(to))
		ch.Annotations[b.k.UpgradeSince()] = kube.Set(b.now.UTC().Format(time.RFC3339))
	}
	return Action{
		Kind: ActTransition, Node: n.Name, ResourceVersion: n.ResourceVersion,
		From: n.State, To: to, Change: ch, Message: msg,
	}
}

// bookkeeping are the annotations the rollout owns, all removed when a
// node is done.
func (b builder) bookkeeping() []string {
	return []string{
		b.k.UpgradeSince(), b.k.UpgradeBootID(), b.k.UpgradeWasCordoned(), b.k.UpgradeTarget(),
		b.k.UpgradeFailureReason(), b.k.UpgradeFailureStep(), b.k.UpgradeRerolled(), b.k.RebootHold(),
	}
}

// fail moves n to upgrade-failed. Before the reboot was asked for, the old
// driver still runs, so the node is given back (uncordoned unless it was
// cordoned before); from the reboot on, the driver state is unknown and
// the node stays cordoned for the admin.
func (b builder) fail(n NodeView, step, reason string) Action {
	a := b.transition(n, contract.StateFailed, "upgrade failed at "+step+": "+reason)
	a.Change.Annotations[b.k.UpgradeFailureStep()] = kube.Set(step)
	a.Change.Annotations[b.k.UpgradeFailureReason()] = kube.Set(reason)
	if n.RebootHold != "" {
		a.Change.Annotations[b.k.RebootHold()] = nil
	}
	if contract.FailedBeforeReboot(step) && n.WasCordoned != nil && n.State != contract.StateCordonRequired {
		giveBack(b, n, &a)
	}
	a.Events = append(a.Events, Event{
		Reason: contract.EventUpgradeFailed, Warning: true,
		Message: "driver upgrade failed at " + step + ": " + reason + "; fix the cause, then retry with: kubectl label node " + n.Name + " " + b.k.UpgradeState() + "=" + string(contract.StateUpgradeRequired) + " --overwrite",
	})
	return a
}

func ptrBool(v bool) *bool { return &v }

// FormatRerolled writes the re-rolled pods annotation: uid=target pairs.
func FormatRerolled(m map[string]string) string {
	out := make([]string, 0, len(m))
	for u, t := range m {
		out = append(out, u+"="+t)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// ParseRerolled reads the re-rolled pods annotation; malformed entries are
// dropped (the worst outcome is one more re-roll of a pod).
func ParseRerolled(s string) map[string]string {
	if s == "" {
		return nil
	}
	out := map[string]string{}
	for _, e := range strings.Split(s, ",") {
		uid, target, ok := strings.Cut(strings.TrimSpace(e), "=")
		if ok && uid != "" && target != "" {
			out[uid] = target
		}
	}
	return out
}
