package procnode

import (
	"context"
	"os/exec"
	"path"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Kubelet defaults of a probe's unset fields.
const (
	defaultPeriod           = 10 * time.Second
	defaultTimeout          = time.Second
	defaultFailureThreshold = 3
	defaultSuccessThreshold = 1
)

// readiness is the result of a container's readiness probe. As with the
// kubelet, a probed container is not ready until its first success.
type readiness struct{ ready atomic.Bool }

// probeArgv resolves an exec readiness probe of a container. Only probes
// whose command is one of our binaries run (with the container's env, as
// the kubelet execs them in the container); any other probe (a vendor
// command, httpGet, tcpSocket) is treated as passing. nil means "no probe
// to run".
func probeArgv(binDir string, p *corev1.Probe, env map[string]string) []string {
	if p == nil || p.Exec == nil || len(p.Exec.Command) == 0 {
		return nil
	}
	bin := imageBinary(path.Base(expand(p.Exec.Command[0], env)))
	if bin == "" {
		return nil
	}
	argv := []string{filepath.Join(binDir, bin)}
	for _, a := range p.Exec.Command[1:] {
		argv = append(argv, expand(a, env))
	}
	return argv
}

// startReadinessProbe probes the container running as proc every
// periodSeconds until the process ends, and enqueues key whenever the
// verdict changes so that the pod status follows.
func (n *Node) startReadinessProbe(key string, c *ctr, proc *process, argv, env []string, dir string) {
	p := c.spec.ReadinessProbe
	r := &readiness{}
	c.readiness = r
	period := seconds(p.PeriodSeconds, defaultPeriod)
	timeout := seconds(p.TimeoutSeconds, defaultTimeout)
	failThreshold := int(p.FailureThreshold)
	if failThreshold <= 0 {
		failThreshold = defaultFailureThreshold
	}
	okThreshold := int(p.SuccessThreshold)
	if okThreshold <= 0 {
		okThreshold = defaultSuccessThreshold
	}
	go func() {
		delay := time.NewTimer(time.Duration(p.InitialDelaySeconds) * time.Second)
		defer delay.Stop()
		select {
		case <-proc.done:
			return
		case <-delay.C:
		}
		tick := time.NewTicker(period)
		defer tick.Stop()
		oks, fails := 0, 0
		for {
			if runProbe(argv, env, dir, timeout) {
				oks, fails = oks+1, 0
			} else {
				oks, fails = 0, fails+1
			}
			was := r.ready.Load()
			now := was
			if !was && oks >= okThreshold {
				now = true
			}
			if was && fails >= failThreshold {
				now = false
			}
			if now != was {
				r.ready.Store(now)
				n.queue.Add(key)
			}
			select {
			case <-proc.done:
				return
			case <-tick.C:
			}
		}
	}()
}

func seconds(s int32, def time.Duration) time.Duration {
	if s <= 0 {
		return def
	}
	return time.Duration(s) * time.Second
}

// runProbe runs one exec probe: exit code 0 within timeout is a success.
func runProbe(argv, env []string, dir string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A timed-out probe dies with everything it started.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd.Run() == nil
}
