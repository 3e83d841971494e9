package procnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Binaries are the images this node runs as real processes; any other
// image is simulated as a container that runs until it is stopped.
var Binaries = []string{"npu-hooks", "npu-rebooter", "npu-healthwatch"}

// imageBinary returns the binary an image stands for, or "" if the image is
// not one of ours: ghcr.io/x/npu-hooks:v1 and npu-hooks@sha256:.. both give
// npu-hooks.
func imageBinary(image string) string {
	name := image
	if i := strings.Index(name, "@"); i >= 0 {
		name = name[:i]
	}
	name = path.Base(name)
	if i := strings.Index(name, ":"); i >= 0 {
		name = name[:i]
	}
	for _, b := range Binaries {
		if name == b {
			return b
		}
	}
	return ""
}

// argv resolves what a container runs, the way a container runtime
// combines command and args (after $(VAR) expansion). A container runs as a
// process when its command is one of our binaries (whatever the image: the
// driver pod runs npu-healthwatch from the vendor's driver image) or, with
// no command, when its image is one of ours. nil means "simulate it".
func argv(binDir string, c *corev1.Container, env map[string]string) ([]string, error) {
	var bin string
	var args []string
	if len(c.Command) > 0 {
		bin = imageBinary(path.Base(expand(c.Command[0], env)))
		if bin == "" {
			if imageBinary(c.Image) != "" {
				return nil, fmt.Errorf("container %s: command %q is not one of %v, the process-backed node cannot run it", c.Name, c.Command[0], Binaries)
			}
			return nil, nil
		}
		for _, a := range c.Command[1:] {
			args = append(args, expand(a, env))
		}
	} else if bin = imageBinary(c.Image); bin == "" {
		return nil, nil
	}
	for _, a := range c.Args {
		args = append(args, expand(a, env))
	}
	return append([]string{filepath.Join(binDir, bin)}, args...), nil
}

var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expand does Kubernetes' $(VAR) substitution: unknown references stay as
// they are and $$ escapes a dollar.
func expand(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// containerEnv resolves a container's env, including the downward API,
// the way the kubelet does before starting it.
func containerEnv(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, c *corev1.Container) (map[string]string, []string, error) {
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, err := client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				return nil, nil, fmt.Errorf("container %s envFrom configmap %s: %w", c.Name, from.ConfigMapRef.Name, err)
			}
			for k, v := range cm.Data {
				set(from.Prefix+k, v)
			}
		case from.SecretRef != nil:
			s, err := client.CoreV1().Secrets(pod.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				return nil, nil, fmt.Errorf("container %s envFrom secret %s: %w", c.Name, from.SecretRef.Name, err)
			}
			for k, v := range s.Data {
				set(from.Prefix+k, string(v))
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, env))
			continue
		}
		v, err := envValue(ctx, client, pod, c, e.ValueFrom)
		if err != nil {
			return nil, nil, fmt.Errorf("container %s env %s: %w", c.Name, e.Name, err)
		}
		set(e.Name, v)
	}
	return env, order, nil
}

func envValue(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, c *corev1.Container, from *corev1.EnvVarSource) (string, error) {
	switch {
	case from.FieldRef != nil:
		return fieldValue(pod, from.FieldRef.FieldPath)
	case from.ResourceFieldRef != nil:
		return resourceValue(c, from.ResourceFieldRef)
	case from.ConfigMapKeyRef != nil:
		cm, err := client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, from.ConfigMapKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		v, ok := cm.Data[from.ConfigMapKeyRef.Key]
		if !ok {
			return "", fmt.Errorf("configmap %s has no key %s", from.ConfigMapKeyRef.Name, from.ConfigMapKeyRef.Key)
		}
		return v, nil
	case from.SecretKeyRef != nil:
		s, err := client.CoreV1().Secrets(pod.Namespace).Get(ctx, from.SecretKeyRef.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		v, ok := s.Data[from.SecretKeyRef.Key]
		if !ok {
			return "", fmt.Errorf("secret %s has no key %s", from.SecretKeyRef.Name, from.SecretKeyRef.Key)
		}
		return string(v), nil
	default:
		return "", fmt.Errorf("unsupported valueFrom (only fieldRef, resourceFieldRef, configMapKeyRef and secretKeyRef are simulated)")
	}
}

// nodeAllocatable stands for the node's allocatable resources, which the
// kubelet reports for a resourceFieldRef to a limit the container does
// not set.
var nodeAllocatable = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourceCPU: resource.MustParse("16")}

// resourceValue is the kubelet's downward API value of a container
// resource, divided by the divisor and rounded up.
func resourceValue(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("resourceFieldRef %q: want limits.<name> or requests.<name>", ref.Resource)
	}
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	q, set := list[corev1.ResourceName(name)]
	if !set {
		if q, set = nodeAllocatable[corev1.ResourceName(name)]; !set {
			return "", fmt.Errorf("resourceFieldRef %q: resource not simulated", ref.Resource)
		}
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if name == string(corev1.ResourceCPU) {
		return strconv.FormatInt((q.MilliValue()+divisor.MilliValue()-1)/divisor.MilliValue(), 10), nil
	}
	return strconv.FormatInt((q.Value()+divisor.Value()-1)/divisor.Value(), 10), nil
}

var labelRef = regexp.MustCompile(`^metadata\.(labels|annotations)\['(.+)'\]$`)

func fieldValue(pod *corev1.Pod, field string) (string, error) {
	switch field {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.hostIP":
		return nodeIP, nil
	}
	if m := labelRef.FindStringSubmatch(field); m != nil {
		if m[1] == "labels" {
			return pod.Labels[m[2]], nil
		}
		return pod.Annotations[m[2]], nil
	}
	return "", fmt.Errorf("unsupported fieldRef %q", field)
}

// process is one running container process.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	code int
}

func startProcess(argv []string, env []string, dir, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open container log: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		p.code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM to the process group and SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	}
}
