package reboot

// What the agent knows of its node and fleet before each decision, and
// the one RebootRequired event a pending reboot gets.

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/openfuyao/npu-stack/internal/budget"
	"github.com/openfuyao/npu-stack/internal/contract"
)

func (a *Agent) facts(ctx context.Context, node *corev1.Node) (Facts, error) {
	bootID, err := a.cfg.Host.BootID()
	if err != nil {
		return Facts{}, fmt.Errorf("read boot ID of node %s: %w", node.Name, err)
	}
	uptime, err := a.cfg.Host.Uptime()
	if err != nil {
		return Facts{}, fmt.Errorf("read uptime of node %s: %w", node.Name, err)
	}
	f := Facts{Node: node, BootID: bootID, Uptime: uptime, SlotHeld: a.slots.Held(a.cachedLeases()), IssuedAt: a.issuedAt, RetryAt: a.retryAt}
	if a.fleet == nil {
		return f, nil
	}
	for _, o := range a.fleet.List() {
		if m, ok := o.(*metav1.PartialObjectMetadata); ok && isRecoveryRequest(m.Labels, m.Annotations, a.keys) {
			f.Fleet.Wedged++
		}
	}
	// Only the storm protection of this node's own recovery reads the
	// fleet's size.
	if isRecoveryRequest(node.Labels, node.Annotations, a.keys) {
		if f.Fleet.NPUNodes, err = a.fleetSize(ctx); err != nil {
			return Facts{}, err
		}
	}
	return f, nil
}

// isRecoveryRequest: reboot-required=true for reason recovery.
func isRecoveryRequest(labels, annotations map[string]string, k contract.Keys) bool {
	return labels[k.RebootRequired()] == contract.True && annotations[k.RebootReason()] == string(contract.ReasonRecovery)
}

func (a *Agent) observe(node *corev1.Node, f Facts, act Action, now time.Time) {
	h, _ := budget.Parse(node.Annotations[a.keys.RebootHistory()])
	inFlight := node.Annotations[a.keys.RebootFromBootID()] != ""
	pending := node.Labels[a.keys.RebootRequired()] == contract.True || inFlight
	if !inFlight {
		h, _ = judge(h, node, a.keys, pending)
	}
	var blocked Cause
	if act.Kind == Wait || act.Kind == ReleaseSlot {
		blocked = act.Cause
	}
	a.metrics.observe(pending, contract.RebootReason(node.Annotations[a.keys.RebootReason()]), f.SlotHeld, a.cfg.Policy.Budget.Left(h, now), blocked)
}

// report announces a wait once per cause and pending reboot.
func (a *Agent) report(node *corev1.Node, act Action) {
	if act.Cause == a.lastCause {
		return
	}
	a.lastCause = act.Cause
	a.cfg.Log.WithField("waitingFor", act.Cause).Info(act.Why)
	if act.Event != "" {
		a.cfg.Recorder.Node(node, act.Warning, act.Event, "%s", act.Why)
	}
}

func (a *Agent) resetPending() {
	a.lastCause, a.lastSlotMsg, a.pendingKey, a.drainedFor = CauseNone, "", "", ""
	a.issuedAt, a.retryAt, a.failures = time.Time{}, time.Time{}, 0
}

// announce makes sure a pending reboot has its one RebootRequired event:
// the requester may have emitted it already, else the rebooter does. It
// reports whether the event is visible in the API.
func (a *Agent) announce(ctx context.Context, node *corev1.Node, f Facts, reason contract.RebootReason, now time.Time) (bool, error) {
	key := f.BootID + "/" + string(reason)
	if a.announced == key {
		return true, nil
	}
	if a.pendingKey != key {
		a.pendingKey, a.pendingSince = key, now
	}
	// Event times have second resolution.
	bootTime := now.Add(-f.Uptime).Truncate(time.Second)
	list, err := a.cfg.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "Node", "involvedObject.name": node.Name, "reason": string(contract.EventRebootRequired),
	}.String()})
	if err != nil {
		return false, fmt.Errorf("list RebootRequired events of node %s: %w", node.Name, err)
	}
	for _, e := range list.Items {
		if strings.Contains(e.Message, "reason="+string(reason)) && !eventTime(&e).Before(bootTime) {
			a.announced = key
			return true, nil
		}
	}
	if a.emitted != key && !now.Before(a.pendingSince.Add(announceGrace)) {
		a.emitted = key
		a.cfg.Recorder.Node(node, false, contract.EventRebootRequired, "node %s needs a reboot: reason=%s", node.Name, reasonText(reason))
	}
	return false, nil
}

func eventTime(e *corev1.Event) time.Time {
	t := e.LastTimestamp.Time
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	if e.EventTime.After(t) {
		t = e.EventTime.Time
	}
	return t
}
