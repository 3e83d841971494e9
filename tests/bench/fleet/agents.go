// One pass of each node agent (rebooter, health-watch, driver entry) on a
// simulated machine, and the node writes they share.

package fleet

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openfuyao/npu-stack/internal/budget"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/driverentry"
	"github.com/openfuyao/npu-stack/internal/health"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/reboot"
)

// takeFresh is the node a step of this pass last wrote (cur if none).
func (m *machine) takeFresh(cur *corev1.Node) *corev1.Node {
	n := m.fresh
	m.fresh = nil
	if n == nil {
		return cur
	}
	return n
}

func (s *Sim) patchBootID(ctx context.Context, m *machine, name, bootID string) error {
	body := fmt.Sprintf(`{"status":{"nodeInfo":{"bootID":%q}}}`, bootID)
	got, err := s.cfg.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status")
	s.writes.Add(1)
	if err != nil {
		return fmt.Errorf("patch the boot ID of node %s: %w", name, err)
	}
	m.fresh = got
	return nil
}

// rebooter is one pass of npu-rebooter's agent with unlimited slots.
func (s *Sim) rebooter(ctx context.Context, node *corev1.Node, m *machine, now time.Time) (time.Duration, bool, error) {
	k := s.cfg.Keys
	bootID, _ := m.host.BootID()
	uptime, _ := m.host.Uptime()
	for {
		act := reboot.Decide(reboot.Facts{Node: node, BootID: bootID, Uptime: uptime, SlotHeld: m.slotHeld, IssuedAt: m.issuedAt,
			Fleet: reboot.Fleet{NPUNodes: 1}}, s.policy, now)
		switch act.Kind {
		case reboot.Idle, reboot.Wait:
			return 0, false, nil
		case reboot.AcquireSlot:
			m.slotHeld = true
			continue
		case reboot.ReleaseSlot:
			m.slotHeld = false
			continue
		case reboot.Reboot:
			if act.Record {
				h, _ := budget.Parse(node.Annotations[k.RebootHistory()])
				change := kube.NodeChange{Annotations: map[string]*string{
					k.RebootFromBootID():    kube.Set(bootID),
					k.RebootStartedAt():     kube.Set(now.UTC().Format(time.RFC3339)),
					k.RebootHistory():       kube.Set(s.policy.Budget.Add(h, now).String()),
					k.RebootStartedReason(): kube.Set(string(act.Reason)),
				}}
				if act.ConsumeApproval {
					change.Annotations[k.ApproveReboot()] = nil
				}
				// A reboot whose bookkeeping did not land must not happen:
				// the real rebooter decides again on the newer node (the
				// rollout may have changed it, e.g. withdrawn the request).
				if wrote, err := s.patchIf(ctx, m, node, change); err != nil || !wrote {
					return 0, true, err
				}
			}
			if s.cfg.Recorder != nil {
				s.cfg.Recorder.Node(node, false, contract.EventRebooting, "rebooting node %s (reason=%s, method %s, boot ID %s)", node.Name, act.Reason, host.RebootSystemd, bootID)
			}
			if err := m.host.Reboot(ctx, host.RebootSystemd); err != nil {
				return 0, true, fmt.Errorf("reboot node %s: %w", node.Name, err)
			}
			s.reboots.Add(1)
			m.issuedAt = now
			t := s.getTiming()
			m.bootAt = now.Add(t.Reboot)
			return max(t.Reboot, time.Millisecond), true, nil
		case reboot.Complete:
			from := node.Annotations[k.RebootFromBootID()]
			change := kube.NodeChange{
				Labels: map[string]*string{k.RebootRequired(): nil},
				Annotations: map[string]*string{k.RebootReason(): nil, k.RebootFromBootID(): nil,
					k.RebootStartedAt(): nil, k.RebootStartedReason(): nil,
					// As the rebooter records the boot it left for the rollout.
					k.RebootedFromBootID(): kube.Set(from)},
			}
			if wrote, err := s.patchIf(ctx, m, node, change); err != nil || !wrote {
				return 0, true, err
			}
			m.slotHeld = false
			if s.cfg.Recorder != nil {
				s.cfg.Recorder.Node(node, false, contract.EventRebootCompleted, "node %s rebooted (reason=%s, boot ID %s -> %s); reboot marker cleared, slot released",
					node.Name, act.Reason, from, bootID)
			}
			return 0, true, nil
		default:
			// Cordon, Uncordon, Fail belong to recoveries and failed
			// reboot commands, which the benchmark does not stage.
			return 0, true, fmt.Errorf("node %s: the simulated rebooter does not stage %s (%s)", node.Name, act.Kind, act.Why)
		}
	}
}

// healthWatch is the sidecar's probe: at boot, at once when the driver
// entry loads a driver (the marker appearing), as the real watch does,
// and every ProbeEvery while the last probe failed; the periodic probes
// of a healthy machine change nothing. A failed probe counts towards the
// failure threshold once, as the real watch's does.
func (s *Sim) healthWatch(ctx context.Context, node *corev1.Node, m *machine, now time.Time) (time.Duration, bool, error) {
	loaded, _ := m.host.LoadedDriver(ctx)
	probed := false
	failing := !m.lastOK && loaded != "" // without a driver a probe fails and counts for nothing
	if !m.probed || m.probedAt != loaded || failing && !now.Before(m.lastTime.Add(s.cfg.ProbeEvery)) {
		r := health.Prober{Host: m.host, Clock: s.cfg.Clock, Timeout: 10 * time.Second}.Probe(ctx, 0)
		m.probed, m.probedAt, m.lastOK, m.lastTime, probed = true, loaded, r.OK, now, true
	}
	var wake time.Duration
	if !m.lastOK && loaded != "" {
		wake = max(m.lastTime.Add(s.cfg.ProbeEvery).Sub(now), time.Millisecond)
		if !probed {
			return wake, false, nil
		}
	}
	k := s.cfg.Keys
	obs := health.Observation{
		Probe:  health.Result{OK: m.lastOK, Reason: "simulated chips report Health Critical"},
		Marker: loaded != "",
		Node: health.NodeView{RebootRequired: node.Labels[k.RebootRequired()] == contract.True,
			RebootReason: node.Annotations[k.RebootReason()], DriverReady: node.Labels[k.DriverReady()]},
	}
	st, acts := health.Decide(healthPolicy, m.health, obs)
	m.health = st
	change := kube.NodeChange{Labels: map[string]*string{}, Annotations: map[string]*string{}}
	if acts.DriverReady != nil {
		change.Labels[k.DriverReady()] = kube.Set(strconv.FormatBool(*acts.DriverReady))
	}
	switch {
	case acts.RequestRecovery:
		change.Labels[k.RebootRequired()] = kube.Set(contract.True)
		change.Annotations[k.RebootReason()] = kube.Set(string(contract.ReasonRecovery))
	case acts.WithdrawRecovery:
		change.Labels[k.RebootRequired()] = nil
		change.Annotations[k.RebootReason()] = nil
	}
	if len(change.Labels) == 0 && len(change.Annotations) == 0 {
		return wake, false, nil
	}
	if err := s.patch(ctx, m, node.Name, change); err != nil {
		return wake, true, err
	}
	if s.cfg.Recorder != nil {
		for _, e := range acts.Events {
			s.cfg.Recorder.Node(node, e.Warning, e.Reason, "%s", e.Message)
		}
	}
	return wake, true, nil
}

// driverEntry is the driver pod's gate: on a fresh boot it loads the
// version of the driver pod on the node; otherwise it reports what is
// loaded.
func (s *Sim) driverEntry(ctx context.Context, node *corev1.Node, m *machine, now time.Time) (time.Duration, bool, error) {
	k := s.cfg.Keys
	loaded, _ := m.host.LoadedDriver(ctx)
	if loaded == "" {
		pod := s.driverPod(node.Name)
		if pod == nil {
			return 0, true, nil // the pod's arrival brings the node back
		}
		if m.loadAt.IsZero() {
			m.loadAt = now.Add(s.getTiming().DriverLoad)
		}
		if now.Before(m.loadAt) {
			return m.loadAt.Sub(now), true, nil
		}
		loaded = pod.Annotations[k.DriverSpecVersion()]
		if err := m.host.InstallDriver(ctx, loaded, nil); err != nil {
			return 0, true, fmt.Errorf("driver pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		s.loads.Add(1)
	}
	if pod := s.driverPod(node.Name); pod != nil && driverentry.StageNow(node, k) {
		// The install over the loaded driver before the reboot: one write,
		// the record the rebooter waits for. The boot's load keeps its
		// DriverLoad time after the reboot.
		if want := pod.Annotations[k.DriverSpecVersion()]; want != loaded && node.Annotations[k.InstalledDriver()] != want {
			return 0, true, s.patch(ctx, m, node.Name, kube.NodeChange{Annotations: map[string]*string{k.InstalledDriver(): kube.Set(want)}})
		}
	}
	if node.Labels[k.DriverVersion()] == loaded && node.Annotations[k.InstalledDriver()] != "" {
		return 0, false, nil
	}
	return 0, true, s.patch(ctx, m, node.Name, kube.NodeChange{Labels: map[string]*string{k.DriverVersion(): kube.Set(loaded)},
		Annotations: map[string]*string{k.InstalledDriver(): kube.Set(loaded)}})
}

// driverPod is the node's running driver pod, if any.
func (s *Sim) driverPod(node string) *corev1.Pod {
	objs, _ := s.pods.ByIndex(byNode, node)
	var best *corev1.Pod
	for _, o := range objs {
		p := o.(*corev1.Pod)
		if !s.isDriver(p) || p.DeletionTimestamp != nil {
			continue
		}
		if best == nil || p.CreationTimestamp.After(best.CreationTimestamp.Time) {
			best = p
		}
	}
	return best
}

func (s *Sim) patch(ctx context.Context, m *machine, name string, change kube.NodeChange) error {
	s.writes.Add(1)
	got, err := kube.PatchNode(ctx, s.cfg.Client, name, change)
	if err != nil {
		return err
	}
	m.fresh = got
	return nil
}

// patchIf writes at the node's resourceVersion; wrote is false on a
// conflict, which means the informer has a newer node on its way, which
// brings the node back.
func (s *Sim) patchIf(ctx context.Context, m *machine, node *corev1.Node, change kube.NodeChange) (wrote bool, err error) {
	s.writes.Add(1)
	got, err := kube.PatchNodeIf(ctx, s.cfg.Client, node.Name, node.ResourceVersion, change)
	if apierrors.IsConflict(err) {
		s.conflicts.Add(1)
		s.cfg.Log.WithField("node", node.Name).Debug("simulated node: conflict; deciding again on the newer node")
		return false, nil
	}
	if err != nil {
		return false, err
	}
	m.fresh = got
	return true, nil
}
