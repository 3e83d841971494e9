package procnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/host/agenthost"
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

func (n *Node) restartLater(ctx context.Context, key string, pod *corev1.Pod, r *podRun, c *ctr) {
	if c.notBefore.IsZero() {
		c.backoff = min(max(2*c.backoff, 250*time.Millisecond), maxBackoff)
		c.notBefore = time.Now().Add(c.backoff)
		c.waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: fmt.Sprintf("back-off %s restarting failed container %s", c.backoff, c.spec.Name)}
	}
	if wait := time.Until(c.notBefore); wait > 0 {
		n.queue.AddAfter(key, wait)
		return
	}
	c.notBefore = time.Time{}
	c.restarts++
	n.startCtr(ctx, key, pod, r, c)
}

func (n *Node) startCtr(ctx context.Context, key string, pod *corev1.Pod, r *podRun, c *ctr) {
	c.exit, c.waiting, c.readiness = nil, nil, nil
	fail := func(reason string, err error) {
		c.waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}
		n.queue.AddAfter(key, time.Second)
	}
	if !n.pullImage(ctx, key, pod, r, c) {
		return
	}
	env, order, err := containerEnv(ctx, n.cfg.Client, pod, &c.spec)
	if err != nil {
		fail("CreateContainerConfigError", err)
		return
	}
	args, err := argv(r.binDir(), &c.spec, env)
	if err != nil {
		fail("CreateContainerError", err)
		return
	}
	c.startedAt = metav1.Now()
	if args == nil {
		// Not our binary: simulated as running until stopped.
		c.running = true
		return
	}
	procEnv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + r.dir, agenthost.EnvVar + "=" + n.host.Dir}
	if ptr.Deref(pod.Spec.AutomountServiceAccountToken, true) {
		kc, err := n.podKubeconfig(ctx, pod, r)
		if err != nil {
			fail("CreateContainerConfigError", err)
			return
		}
		procEnv = append(procEnv, "KUBECONFIG="+kc)
	}
	for _, k := range order {
		procEnv = append(procEnv, k+"="+env[k])
	}
	p, err := startProcess(args, procEnv, r.dir, filepath.Join(r.dir, c.spec.Name+".log"))
	if err != nil {
		fail("RunContainerError", err)
		return
	}
	// For KillContainer, which must not touch the worker's pod table.
	_ = os.WriteFile(filepath.Join(r.dir, c.spec.Name+".pid"), []byte(strconv.Itoa(p.cmd.Process.Pid)), 0o644)
	c.proc, c.running = p, true
	if probe := probeArgv(r.binDir(), c.spec.ReadinessProbe, env); probe != nil {
		n.startReadinessProbe(key, c, p, probe, procEnv, r.dir)
	}
	go func() {
		<-p.done
		n.queue.Add(key)
	}()
}

// pullImage pulls c's image as the kubelet does before creating the
// container; on failure the container waits in ErrImagePull, then
// ImagePullBackOff, with the registry's message, and is retried with the
// kubelet's back-off. Our executable in the image is put where the pod's
// containers and probes find it (the driver container runs the
// npu-healthwatch its init container's image brought).
func (n *Node) pullImage(ctx context.Context, key string, pod *corev1.Pod, r *podRun, c *ctr) bool {
	p, err := n.images.pull(ctx, pod, &c.spec)
	if err == nil && p.binary != "" {
		err = r.link(p.binary)
	}
	if err != nil {
		c.pullFailures++
		c.backoff = min(max(2*c.backoff, 250*time.Millisecond), maxBackoff)
		c.waiting = &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: err.Error()}
		if c.pullFailures > 1 {
			c.waiting = &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: fmt.Sprintf("Back-off pulling image %q: ErrImagePull: %v", c.spec.Image, err)}
		}
		n.queue.AddAfter(key, c.backoff)
		return false
	}
	c.pullFailures = 0
	return true
}

func (r *podRun) binDir() string { return filepath.Join(r.dir, "bin") }

// link makes an executable taken from one of the pod's images available
// to the pod's containers under its own name.
func (r *podRun) link(binary string) error {
	dst := filepath.Join(r.binDir(), filepath.Base(binary))
	if target, err := os.Readlink(dst); err == nil && target == binary {
		return nil
	}
	if err := os.MkdirAll(r.binDir(), 0o755); err != nil {
		return fmt.Errorf("pod bin dir: %w", err)
	}
	_ = os.Remove(dst)
	if err := os.Symlink(binary, dst); err != nil {
		return fmt.Errorf("link %s: %w", binary, err)
	}
	return nil
}

// podKubeconfig gives the pod's processes the identity the pod would have
// in cluster: a token for its service account bound to the pod, so RBAC
// applies exactly as on a real node.
func (n *Node) podKubeconfig(ctx context.Context, pod *corev1.Pod, r *podRun) (string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := n.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](tokenLifetimeSecs),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for service account %s/%s: %w", pod.Namespace, sa, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["in-cluster"] = &clientcmdapi.Cluster{Server: n.cfg.RESTConfig.Host, CertificateAuthorityData: n.cfg.RESTConfig.CAData}
	kc.AuthInfos["pod"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["in-cluster"] = &clientcmdapi.Context{Cluster: "in-cluster", AuthInfo: "pod", Namespace: pod.Namespace}
	kc.CurrentContext = "in-cluster"
	path := filepath.Join(r.dir, kubeconfigName)
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("write pod kubeconfig: %w", err)
	}
	return path, nil
}

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
	st.HostIP, st.PodIP = nodeIP, nodeIP
	st.HostIPs = []corev1.HostIP{{IP: nodeIP}}
	st.PodIPs = []corev1.PodIP{{IP: nodeIP}}
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
