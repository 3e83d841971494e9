package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// The kubelet's part in a reboot. On a real node the kubelet restarts every
// pod's containers in place after a boot (same pod UID): the driver pod's
// container restarts at boot and turns Ready once the driver is loaded (its
// readiness is the marker the load writes); the device-plugin and exporter
// pods' init container (`validate --wait`) holds their containers until the
// driver is ready, so they start after the driver pod is Ready again.
//
// KWOK runs no containers, and the simulator plays the kubelet's restart
// itself with two writes to the pod's status subresource:
//
//   - hold, at boot, every pod but the driver's: not Ready, its containers
//     waiting and its first init container running (`validate --wait`);
//   - start: Running and Ready, its init containers completed and its
//     containers started now (restart count one up), the boot's restart
//     mark in status.message. A Running, Ready pod is out of KWOK's
//     pod-ready stage (kwok-stages.yaml), so KWOK leaves it alone.
//
// The simulator does not leave the start to KWOK's pod-ready stage: KWOK
// plays stages with four workers and does not retry a patch the API
// server rejects, so with a thousand nodes rebooting at once its queue,
// and re-writes of the starts it lost, would set the benchmark's pace
// rather than the rollout.
//
// The driver pod starts once the driver load completes; the others once the
// driver pod is Ready again after its start (Ready, with this boot's mark)
// and the node has driver-ready=true.
//
// The driver pod is not held at boot: until the load completes it still
// shows the Ready of the previous boot, which no decision reads meanwhile
// (the rollout validates a node only once its driver-version label names
// the new driver, written after the load). The others are held from boot,
// as their init container holds them, so no decision can see them running
// since before the driver became ready again. Holding them only from the
// driver pod's Ready leaves a window where the rollout sees a valid driver
// and pods started before it, and re-rolls them.
//
// Only pods that exist at boot restart; a pod created afterwards starts
// fresh through KWOK as usual. First boots restart nothing.

// restart is what the simulated kubelet still has to do after a reboot.
type restart struct {
	boot string
	pods map[types.UID]*podRestart
}

// podRestart is one pod to restart in place.
type podRestart struct {
	namespace, name string
	driver          bool
	held            bool
	started         bool // its start was written
	up              bool // its start seen in the cache, or gone
}

// mark is the status.message of the pods restarted for boot: a Ready pod
// with it has been Ready again since.
func (r *restart) mark() string {
	return fmt.Sprintf("containers restarted in place after boot %s (simulated kubelet)", r.boot)
}

// podsAtBoot are the node's pods the kubelet restarts after boot: the
// running pods of the chart namespace whose containers restart always
// (DaemonSet pods).
func (s *Sim) podsAtBoot(node, boot string) *restart {
	objs, _ := s.pods.ByIndex(byNode, node)
	r := &restart{boot: boot, pods: map[types.UID]*podRestart{}}
	for _, o := range objs {
		p := o.(*corev1.Pod)
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed ||
			(p.Spec.RestartPolicy != "" && p.Spec.RestartPolicy != corev1.RestartPolicyAlways) {
			continue
		}
		r.pods[p.UID] = &podRestart{namespace: p.Namespace, name: p.Name, driver: s.isDriver(p)}
	}
	if len(r.pods) == 0 {
		return nil
	}
	return r
}

func (s *Sim) isDriver(p *corev1.Pod) bool {
	return s.cfg.DriverSelector.Matches(labels.Set(p.Labels)) && p.Annotations[s.cfg.Keys.DriverSpecVersion()] != ""
}

// kubelet is one pass of the kubelet's restarts after a reboot; it writes
// the status of several pods at once (independent objects, as the kubelet
// restarts them together). wrote is false when it is waiting (for the
// driver load, the driver pod's Ready, driver-ready=true, or the echo of
// its own starts): a watch event brings the node back.
func (s *Sim) kubelet(ctx context.Context, node *corev1.Node, m *machine, now time.Time) (time.Duration, bool, error) {
	r := m.restart
	if r != nil {
		// First: a pod seen started is the kubelet's own again, and
		// reassertReady may have to correct it in this very pass.
		s.observe(r)
	}
	if wrote, err := s.reassertReady(ctx, node.Name, r, now); wrote || err != nil {
		return 0, wrote, err
	}
	if r == nil {
		return 0, false, nil
	}
	if hold := r.pending(func(p *podRestart) bool { return !p.driver && !p.held }); len(hold) > 0 {
		return s.restartPods(ctx, r, hold, false, now)
	}
	if loaded, _ := m.host.LoadedDriver(ctx); loaded == "" {
		return 0, false, nil
	}
	if drv := r.pending(func(p *podRestart) bool { return p.driver && !p.started }); len(drv) > 0 {
		return s.restartPods(ctx, r, drv, true, now)
	}
	if s.driverReadyAgain(node.Name, r) && node.Labels[s.cfg.Keys.DriverReady()] == contract.True {
		if rest := r.pending(func(p *podRestart) bool { return !p.started }); len(rest) > 0 {
			return s.restartPods(ctx, r, rest, true, now)
		}
	}
	if len(r.pending(func(p *podRestart) bool { return !p.up })) == 0 {
		m.restart = nil
		s.cfg.Log.WithField("node", node.Name).Debug("simulated kubelet: every pod restarted and Ready again")
		return 0, false, nil
	}
	s.cfg.Log.WithFields(logrus.Fields{"node": node.Name, "driverReadyAgain": s.driverReadyAgain(node.Name, r),
		"driverReadyLabel": node.Labels[s.cfg.Keys.DriverReady()], "notStarted": len(r.pending(func(p *podRestart) bool { return !p.started })),
		"notReadyAgain": len(r.pending(func(p *podRestart) bool { return !p.up }))}).Debug("simulated kubelet: waiting")
	return 0, false, nil
}

// podOf is the restart of the pod with uid, nil if none.
func (r *restart) podOf(uid types.UID) *podRestart {
	if r == nil {
		return nil
	}
	return r.pods[uid]
}

// reassertReady writes Ready back on the node's running pods whose
// containers are ready but whose Ready condition is False, and that no
// restart of the simulator holds (held, or started and not yet Ready
// again; a driver pod marked so after KWOK made it Ready again would
// otherwise hold its node's other pods for good): the node lifecycle controller marks a
// node's pods so when it misses the node's heartbeats for its grace
// period (the benchmark's lease renewals lag while a 5,000-node fleet is
// created), and a real kubelet's status manager corrects the pod's status
// on its next sync. KWOK does not: its pod-ready stage needs phase Pending.
func (s *Sim) reassertReady(ctx context.Context, node string, r *restart, now time.Time) (bool, error) {
	objs, _ := s.pods.ByIndex(byNode, node)
	wrote := false
	for _, o := range objs {
		p := o.(*corev1.Pod)
		// A pod of a restart is the simulator's until it is Ready again
		// after its start; from then on it is as any running pod.
		if pr := r.podOf(p.UID); pr != nil && !pr.up {
			continue
		}
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || podReady(p) || !conditionTrue(p, corev1.ContainersReady) {
			continue
		}
		body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)},
		}}})
		if err != nil {
			return wrote, fmt.Errorf("pod %s/%s Ready patch: %w", p.Namespace, p.Name, err)
		}
		s.writes.Add(1)
		got, err := s.cfg.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return wrote, fmt.Errorf("write Ready back on pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		wrote = wrote || got.ResourceVersion != p.ResourceVersion
		s.reasserts.Add(1)
		s.cfg.Log.WithFields(logrus.Fields{"node": node, "pod": p.Name}).Info("simulated kubelet: pod marked not Ready with its containers ready (node lifecycle controller); Ready written back")
	}
	return wrote, nil
}

func conditionTrue(p *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// observe marks the started pods whose start the cache shows (this
// boot's mark: the start wrote it with Ready in one write), or that are
// gone. It must not wait for Ready itself: the node lifecycle controller
// may mark the pod not Ready before the simulator's cache sees the start,
// and a pod of a restart that is not up is not written Ready back: its
// node would wait for good.
func (s *Sim) observe(r *restart) {
	for uid, pr := range r.pods {
		if !pr.started || pr.up {
			continue
		}
		p := s.cachedPod(pr, uid)
		pr.up = p == nil || p.Status.Message == r.mark()
	}
}

func (r *restart) pending(pred func(*podRestart) bool) []types.UID {
	var out []types.UID
	for uid, p := range r.pods {
		if pred(p) {
			out = append(out, uid)
		}
	}
	return out
}

// cachedPod is the pod to restart as cached, nil if it is gone (deleted,
// terminating, or replaced by a pod of the same name).
func (s *Sim) cachedPod(pr *podRestart, uid types.UID) *corev1.Pod {
	obj, ok, _ := s.pods.GetByKey(pr.namespace + "/" + pr.name)
	p, _ := obj.(*corev1.Pod)
	if !ok || p == nil || p.UID != uid || p.DeletionTimestamp != nil {
		return nil
	}
	return p
}

// driverReadyAgain is true once the node's driver pod is Ready after its
// restart (or is a pod created since the boot, which never ran before).
func (s *Sim) driverReadyAgain(node string, r *restart) bool {
	p := s.driverPod(node)
	if p == nil || !podReady(p) {
		return false
	}
	pr, restarted := r.pods[p.UID]
	return !restarted || (pr.started && p.Status.Message == r.mark())
}

// restartPods holds (start false) or starts the pods; a pod deleted or
// replaced meanwhile has nothing left to restart. wrote is false when no
// pod changed (none left, or a patch identical to what the pod already
// says, e.g. a second hold within the same second): no watch event would
// bring the node back.
func (s *Sim) restartPods(ctx context.Context, r *restart, uids []types.UID, start bool, now time.Time) (time.Duration, bool, error) {
	wrote := false
	for _, uid := range uids {
		pr := r.pods[uid]
		p := s.cachedPod(pr, uid)
		if p == nil {
			pr.held, pr.started, pr.up = true, true, true
			continue
		}
		body, err := restartStatus(p, start, r.mark(), now)
		if err != nil {
			return 0, wrote, err
		}
		s.writes.Add(1)
		got, err := s.cfg.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
		changed := err == nil && got.ResourceVersion != p.ResourceVersion
		log := s.cfg.Log.WithFields(logrus.Fields{"node": p.Spec.NodeName, "pod": p.Name})
		switch {
		case apierrors.IsNotFound(err):
			pr.held, pr.started, pr.up = true, true, true
		case err != nil:
			return 0, wrote, fmt.Errorf("restart pod %s/%s after the reboot: %w", p.Namespace, p.Name, err)
		case start:
			wrote = wrote || changed
			pr.held, pr.started = true, true
			s.restarts.Add(1)
			log.Debug("simulated kubelet: containers started again")
		default:
			wrote = wrote || changed
			pr.held = true
			log.Debug("simulated kubelet: containers held after the boot")
		}
	}
	return 0, wrote, nil
}

func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0 || a < b:
		return a
	}
	return b
}

// restartStatus is the strategic merge patch of a pod's status that holds
// it (not Ready, containers waiting for the first init container) or
// starts it (Running and Ready, containers started now). Pod conditions
// merge by type; container statuses are replaced whole; the pod IP stays.
func restartStatus(p *corev1.Pod, start bool, mark string, now time.Time) ([]byte, error) {
	t := metav1.NewTime(now)
	restarts := map[string]int32{}
	for _, cs := range p.Status.ContainerStatuses {
		restarts[cs.Name] = cs.RestartCount
	}
	var ctrs, inits []corev1.ContainerStatus
	for _, c := range p.Spec.Containers {
		st := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: new(bool), RestartCount: restarts[c.Name],
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}
		if start {
			st.Ready, st.Started, st.RestartCount = true, ptr.To(true), restarts[c.Name]+1
			st.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}}
		}
		ctrs = append(ctrs, st)
	}
	for i, c := range p.Spec.InitContainers {
		st := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: new(bool),
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}
		switch {
		case start:
			st.Ready = true
			st.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: t, FinishedAt: t}}
		case i == 0:
			st.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}}
		}
		inits = append(inits, st)
	}
	cond := corev1.ConditionFalse
	if start {
		cond = corev1.ConditionTrue
	}
	status := map[string]any{
		"conditions": []corev1.PodCondition{
			{Type: corev1.PodReady, Status: cond, LastTransitionTime: t},
			{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: t},
			{Type: corev1.PodInitialized, Status: cond, LastTransitionTime: t},
		},
		"containerStatuses":     ctrs,
		"initContainerStatuses": inits,
		// Running even if the pod was still Pending at the boot: a held
		// pod must stay out of KWOK's pod-ready stage.
		"phase": corev1.PodRunning,
	}
	if start {
		status["message"] = mark
	}
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s status patch: %w", p.Namespace, p.Name, err)
	}
	return body, nil
}

func podReady(p *corev1.Pod) bool { return conditionTrue(p, corev1.PodReady) }
