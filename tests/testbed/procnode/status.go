// The pod status a kubelet writes: each container's state from its process.

package procnode

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func ctrStatus(c *ctr) corev1.ContainerStatus {
	s := corev1.ContainerStatus{Name: c.spec.Name, Image: c.spec.Image, ImageID: c.spec.Image, RestartCount: c.restarts, ContainerID: "procnode://" + c.spec.Name}
	switch {
	case c.running:
		s.State.Running = &corev1.ContainerStateRunning{StartedAt: c.startedAt}
		s.Ready, s.Started = c.readiness == nil || c.readiness.ready.Load(), ptr.To(true)
	case c.exit != nil && c.waiting == nil:
		s.State.Terminated = c.exit
		s.Started = ptr.To(false)
	default:
		w := c.waiting
		if w == nil {
			w = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
		}
		s.State.Waiting = w
		if c.exit != nil {
			s.LastTerminationState.Terminated = c.exit
		}
		s.Started = ptr.To(false)
	}
	return s
}

func (n *Node) writeStatus(ctx context.Context, pod *corev1.Pod, r *podRun) error {
	st := pod.Status.DeepCopy()
	st.HostIP, st.PodIP = nodeIP, n.podIP()
	st.HostIPs = []corev1.HostIP{{IP: nodeIP}}
	st.PodIPs = []corev1.PodIP{{IP: n.podIP()}}
	st.StartTime = &r.started
	st.InitContainerStatuses, st.ContainerStatuses = nil, nil
	for _, c := range r.init {
		st.InitContainerStatuses = append(st.InitContainerStatuses, ctrStatus(c))
	}
	ready := r.terminal == ""
	anyRunning := false
	for _, c := range r.main {
		cs := ctrStatus(c)
		ready = ready && cs.Ready
		anyRunning = anyRunning || c.running
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	initialized := r.initDone == len(r.init)
	switch {
	case r.terminal != "":
		st.Phase, st.Reason = r.terminal, r.reason
	case initialized && anyRunning:
		st.Phase = corev1.PodRunning
	default:
		st.Phase = corev1.PodPending
	}
	setCond := func(t corev1.PodConditionType, ok bool) {
		status := corev1.ConditionFalse
		if ok {
			status = corev1.ConditionTrue
		}
		for i, c := range st.Conditions {
			if c.Type == t {
				if c.Status != status {
					st.Conditions[i].Status, st.Conditions[i].LastTransitionTime = status, metav1.Now()
				}
				return
			}
		}
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: metav1.Now()})
	}
	setCond(corev1.PodInitialized, initialized)
	setCond(corev1.ContainersReady, ready)
	setCond(corev1.PodReady, ready)
	sort.Slice(st.Conditions, func(i, j int) bool { return st.Conditions[i].Type < st.Conditions[j].Type })
	if apiequality.Semantic.DeepEqual(st, &pod.Status) {
		return nil
	}
	p := pod.DeepCopy()
	p.Status = *st
	_, err := n.cfg.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pod %s/%s status: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
