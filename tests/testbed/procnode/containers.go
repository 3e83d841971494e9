// A container's process: its image's binary linked into the pod's directory,
// its service-account kubeconfig, its start and its restart.

package procnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/openfuyao/npu-stack/internal/host/agenthost"
)

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
	args = bindPodIP(args, n.cfg.PodIP)
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
