package agents

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"github.com/openfuyao/npu-stack/tests/bench/procstat"
)

// statusAtExit runs path with args to completion and returns its
// /proc/<pid>/status memory figures read at its exit, while the process
// still has its memory: it runs under ptrace with PTRACE_O_TRACEEXIT and
// is read at the exit stop.
//
// Not wait4's ru_maxrss: Go starts a child with clone(CLONE_VM|CLONE_VFORK),
// so until its execve the child runs in the parent's address space, and
// Linux keeps the high-water mark of that address space as the child's
// maxrss. For a short-lived child, wait4 reports the parent's peak RSS.
func statusAtExit(ctx context.Context, path string, args ...string) (procstat.Usage, error) {
	type result struct {
		u   procstat.Usage
		err error
	}
	done := make(chan result, 1)
	go func() {
		// ptrace requests must come from the thread that started the
		// tracee. The thread is unlocked again, not left to end with the
		// goroutine: a thread that ends sends the Pdeathsig of every child
		// it ever started, and the test bed starts its control plane with
		// Pdeathsig=SIGKILL from whichever thread runs it.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		u, err := traceToExit(ctx, path, args)
		done <- result{u, err}
	}()
	r := <-done
	return r.u, r.err
}

func traceToExit(ctx context.Context, path string, args []string) (procstat.Usage, error) {
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		return procstat.Usage{}, fmt.Errorf("start %s under ptrace: %w", path, err)
	}
	pid := cmd.Process.Pid
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()

	var ws syscall.WaitStatus
	reaped := false
	wait := func() error {
		for {
			_, err := syscall.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, syscall.EINTR) {
				if err == nil && (ws.Exited() || ws.Signaled()) {
					reaped = true
				}
				return err
			}
		}
	}
	// On every way out, the tracee is gone and reaped.
	defer func() {
		for !reaped {
			_ = cmd.Process.Kill()
			_ = syscall.PtraceCont(pid, 0) // out of a ptrace stop, if in one
			if wait() != nil {
				break
			}
		}
		_ = cmd.Process.Release()
	}()
	// The tracee stops with SIGTRAP after its execve.
	if err := wait(); err != nil {
		return procstat.Usage{}, fmt.Errorf("wait for %s to start: %w", path, err)
	}
	if !ws.Stopped() {
		return procstat.Usage{}, fmt.Errorf("%s did not stop after its exec (status %v)", path, ws)
	}
	if err := syscall.PtraceSetOptions(pid, syscall.PTRACE_O_TRACEEXIT); err != nil {
		return procstat.Usage{}, fmt.Errorf("trace the exit of %s: %w", path, err)
	}
	var (
		u      procstat.Usage
		read   bool
		signal int
	)
	for {
		if err := syscall.PtraceCont(pid, signal); err != nil {
			return procstat.Usage{}, fmt.Errorf("continue %s: %w", path, err)
		}
		if err := wait(); err != nil {
			return procstat.Usage{}, fmt.Errorf("wait for %s: %w", path, err)
		}
		signal = 0
		switch {
		case ws.Exited() || ws.Signaled():
			if !read {
				return procstat.Usage{}, fmt.Errorf("%s ended (status %v) without an exit stop", path, ws)
			}
			if ws.Signaled() || ws.ExitStatus() != 0 {
				return u, fmt.Errorf("%s %v: %v", path, args, ws)
			}
			return u, nil
		case ws.Stopped() && ws.TrapCause() == syscall.PTRACE_EVENT_EXIT:
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				return procstat.Usage{}, fmt.Errorf("read the status of %s at its exit: %w", path, err)
			}
			if u.PeakRSS, u.RSS, u.AnonRSS, err = procstat.ParseStatus(status); err != nil {
				return procstat.Usage{}, fmt.Errorf("%s at its exit: %w", path, err)
			}
			read = true
		case ws.Stopped() && ws.StopSignal() != syscall.SIGTRAP:
			// A signal for the tracee (the Go runtime's SIGURG, ...):
			// deliver it.
			signal = int(ws.StopSignal())
		}
	}
}
