package procnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const (
	maxBackoff        = 5 * time.Second
	reasonNodeReboot  = "NodeRebooted"
	maxDeleteGrace    = 30 * time.Second
	kubeconfigName    = "kubeconfig"
	tokenLifetimeSecs = 3600
)

// ctr is one container of a pod as this node runs it.
type ctr struct {
	spec      corev1.Container
	proc      *process // nil when simulated (not our binary) or not running
	running   bool
	startedAt metav1.Time
	exit      *corev1.ContainerStateTerminated
	restarts  int32
	backoff   time.Duration
	notBefore time.Time
	waiting   *corev1.ContainerStateWaiting
	// readiness is the readiness probe's verdict for the current process;
	// nil when the container has no probe this node runs.
	readiness *readiness
	// pullFailures counts failed pulls in a row: the first shows
	// ErrImagePull, the next ImagePullBackOff, as on a kubelet.
	pullFailures int
}

// podRun is a pod as this node runs it.
type podRun struct {
	uid      types.UID
	dir      string
	init     []*ctr
	main     []*ctr
	initDone int
	started  metav1.Time
	terminal corev1.PodPhase // Succeeded or Failed once the pod is over
	reason   string
	policy   corev1.RestartPolicy
}

func (r *podRun) all() []*ctr { return append(append([]*ctr{}, r.init...), r.main...) }

func (r *podRun) kill(grace time.Duration) {
	for _, c := range r.all() {
		if c.proc != nil {
			c.proc.stop(grace)
		}
	}
}

// terminate records the end of every container of a pod being deleted
// (processes were just killed; simulated ones stop with SIGTERM's 143)
// and sets the pod's terminal phase; false if it already had one.
func (r *podRun) terminate() bool {
	if r.terminal != "" {
		return false
	}
	ok := true
	for _, c := range r.all() {
		switch {
		case c.proc != nil:
			<-c.proc.done
			reason := "Completed"
			if c.proc.code != 0 {
				reason = "Error"
			}
			c.exit = &corev1.ContainerStateTerminated{ExitCode: int32(c.proc.code), Reason: reason, StartedAt: c.startedAt, FinishedAt: metav1.Now()}
		case c.running:
			c.exit = &corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error", StartedAt: c.startedAt, FinishedAt: metav1.Now()}
		}
		c.proc, c.running, c.waiting = nil, false, nil
		ok = ok && (c.exit == nil || c.exit.ExitCode == 0)
	}
	r.terminal = corev1.PodFailed
	if ok && len(r.main) > 0 && r.main[0].exit != nil {
		r.terminal = corev1.PodSucceeded
	}
	return true
}

// afterReboot restarts the pod's containers as the kubelet does after a
// boot; a pod that must not restart fails instead.
func (r *podRun) afterReboot() {
	if r.policy == corev1.RestartPolicyNever || r.terminal != "" {
		for _, c := range r.all() {
			if c.running {
				c.exit = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: reasonNodeReboot, StartedAt: c.startedAt, FinishedAt: metav1.Now()}
			}
			c.proc, c.running = nil, false
		}
		if r.terminal == "" {
			r.terminal, r.reason = corev1.PodFailed, reasonNodeReboot
		}
		return
	}
	for _, c := range r.all() {
		if c.proc != nil || c.running || c.exit != nil {
			c.restarts++
		}
		c.proc, c.running, c.exit, c.waiting, c.readiness = nil, false, nil, nil, nil
		c.notBefore = time.Time{}
	}
	r.initDone = 0
}

func (n *Node) sync(ctx context.Context, key string) error {
	obj, exists, err := n.store.GetByKey(key)
	if err != nil {
		return err
	}
	r := n.pods[key]
	if !exists {
		if r != nil {
			r.kill(0)
			delete(n.pods, key)
		}
		return nil
	}
	pod := obj.(*corev1.Pod)
	if r != nil && r.uid != pod.UID {
		r.kill(0)
		delete(n.pods, key)
		r = nil
	}
	if pod.DeletionTimestamp != nil {
		if r != nil {
			grace := maxDeleteGrace
			if g := pod.DeletionGracePeriodSeconds; g != nil && time.Duration(*g)*time.Second < grace {
				grace = time.Duration(*g) * time.Second
			}
			r.kill(grace)
			delete(n.pods, key)
			// As the kubelet does, the pod reaches a terminal phase before it
			// goes: a Job (podReplacementPolicy Failed, the default with a
			// podFailurePolicy) replaces a deleted pod only once it is Failed.
			if r.terminate() {
				if err := n.writeStatus(ctx, pod, r); err != nil && !apierrors.IsConflict(err) {
					return err
				}
			}
		}
		// The kubelet has the last word on deletion: grace 0 once the
		// containers are gone.
		err := n.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	}
	if r == nil {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return nil
		}
		r = &podRun{uid: pod.UID, dir: filepath.Join(n.cfg.Dir, "pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID)), started: metav1.Now(), policy: pod.Spec.RestartPolicy}
		for _, c := range pod.Spec.InitContainers {
			r.init = append(r.init, &ctr{spec: c})
		}
		for _, c := range pod.Spec.Containers {
			r.main = append(r.main, &ctr{spec: c})
		}
		if err := os.MkdirAll(r.dir, 0o755); err != nil {
			return fmt.Errorf("pod %s: %w", key, err)
		}
		n.pods[key] = r
	}
	n.advance(ctx, key, pod, r)
	return n.writeStatus(ctx, pod, r)
}

// advance moves the pod forward: init containers one by one, then every
// container, restarting per restartPolicy with the kubelet's backoff.
func (n *Node) advance(ctx context.Context, key string, pod *corev1.Pod, r *podRun) {
	if r.terminal != "" {
		return
	}
	policy := pod.Spec.RestartPolicy
	n.reap(r)
	for r.initDone < len(r.init) {
		c := r.init[r.initDone]
		switch {
		case c.exit == nil && !c.running:
			n.startCtr(ctx, key, pod, r, c)
			return
		case c.running:
			return
		case c.exit.ExitCode == 0:
			r.initDone++
		case policy == corev1.RestartPolicyNever:
			r.terminal, r.reason = corev1.PodFailed, "InitContainerFailed"
			return
		default:
			n.restartLater(ctx, key, pod, r, c)
			return
		}
	}
	allDone, allOK := true, true
	for _, c := range r.main {
		switch {
		case c.exit == nil && !c.running:
			n.startCtr(ctx, key, pod, r, c)
			allDone = false
		case c.running:
			allDone = false
		case policy == corev1.RestartPolicyAlways || (policy == corev1.RestartPolicyOnFailure && c.exit.ExitCode != 0):
			n.restartLater(ctx, key, pod, r, c)
			allDone = false
		default:
			allOK = allOK && c.exit.ExitCode == 0
		}
	}
	if allDone && len(r.main) > 0 {
		r.terminal = corev1.PodSucceeded
		if !allOK {
			r.terminal = corev1.PodFailed
		}
	}
}

// reap records the exit of processes that ended.
func (n *Node) reap(r *podRun) {
	for _, c := range r.all() {
		if c.proc == nil {
			continue
		}
		select {
		case <-c.proc.done:
			reason := "Completed"
			if c.proc.code != 0 {
				reason = "Error"
			}
			c.exit = &corev1.ContainerStateTerminated{ExitCode: int32(c.proc.code), Reason: reason, StartedAt: c.startedAt, FinishedAt: metav1.Now()}
			c.proc, c.running = nil, false
		default:
		}
	}
}

// KillContainer SIGKILLs the running process of a container of a pod on
// this node, as an OOM kill or a crash would; the node restarts it per the
// pod's restartPolicy.
func (n *Node) KillContainer(namespace, pod, container string) error {
	matches, _ := filepath.Glob(filepath.Join(n.cfg.Dir, "pods", namespace+"_"+pod+"_*", container+".pid"))
	if len(matches) == 0 {
		return fmt.Errorf("node %s: no process of container %s in pod %s/%s", n.cfg.Name, container, namespace, pod)
	}
	var errs []error
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m, err))
			continue
		}
		if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill %s/%s %s (pid %d): %w", namespace, pod, container, pid, err))
		}
	}
	return errors.Join(errs...)
}

// Logs returns what a container of a pod on this node printed.
func (n *Node) Logs(namespace, pod, container string) string {
	matches, _ := filepath.Glob(filepath.Join(n.cfg.Dir, "pods", namespace+"_"+pod+"_*", container+".log"))
	var b strings.Builder
	for _, m := range matches {
		data, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		b.Write(data)
	}
	return b.String()
}
