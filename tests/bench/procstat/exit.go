package procstat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// RunToExit starts cmd and waits for it to end, and returns its CPU time
// and its /proc/<pid>/status memory figures read at its exit, while the
// process still has its memory: it runs under ptrace with
// PTRACE_O_TRACEEXIT and is read at the exit stop. cmd comes from
// exec.Command, not started, with Stdout and Stderr nil or files: it is
// reaped here, not by cmd.Wait, so nothing may wait on it (no
// CommandContext, no output pipes to copy). When ctx ends the process is
// killed. A process that exits non-zero returns its usage and
// an error.
//
// Not wait4's ru_maxrss: Go starts a child with clone(CLONE_VM|CLONE_VFORK),
// so until its execve the child runs in the parent's address space, and
// Linux keeps the high-water mark of that address space as the child's
// maxrss. Whenever the parent is bigger than the child (a benchmark that
// holds a 5,000-node cache, a short-lived child), wait4 reports the
// parent's peak.
func RunToExit(ctx context.Context, cmd *exec.Cmd) (Usage, error) {
	type result struct {
		u   Usage
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
		u, err := traceToExit(ctx, cmd)
		done <- result{u, err}
	}()
	r := <-done
	return r.u, r.err
}

func traceToExit(ctx context.Context, cmd *exec.Cmd) (Usage, error) {
	path, args := cmd.Path, cmd.Args
	for _, w := range []any{cmd.Stdout, cmd.Stderr} {
		if _, isFile := w.(*os.File); w != nil && !isFile {
			return Usage{}, fmt.Errorf("run %s to its exit: its output must go to a file, not a %T", path, w)
		}
	}
	if cmd.Cancel != nil {
		return Usage{}, fmt.Errorf("run %s to its exit: made with exec.CommandContext, whose Wait this would bypass; use exec.Command", path)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Ptrace = true
	if err := cmd.Start(); err != nil {
		return Usage{}, fmt.Errorf("start %s under ptrace: %w", path, err)
	}
	pid := cmd.Process.Pid
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stop()

	var (
		ws syscall.WaitStatus
		ru syscall.Rusage
	)
	reaped := false
	wait := func() error {
		for {
			_, err := syscall.Wait4(pid, &ws, 0, &ru)
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
		// cmd.Wait would wait4 again, on a reaped pid: release instead.
		_ = cmd.Process.Release()
	}()
	// The tracee stops with SIGTRAP after its execve.
	if err := wait(); err != nil {
		return Usage{}, fmt.Errorf("wait for %s to start: %w", path, err)
	}
	if !ws.Stopped() {
		return Usage{}, fmt.Errorf("%s did not stop after its exec (status %v)", path, ws)
	}
	if err := syscall.PtraceSetOptions(pid, syscall.PTRACE_O_TRACEEXIT); err != nil {
		return Usage{}, fmt.Errorf("trace the exit of %s: %w", path, err)
	}
	var (
		u      Usage
		read   bool
		signal int
	)
	for {
		if err := syscall.PtraceCont(pid, signal); err != nil {
			return Usage{}, fmt.Errorf("continue %s: %w", path, err)
		}
		if err := wait(); err != nil {
			return Usage{}, fmt.Errorf("wait for %s: %w", path, err)
		}
		signal = 0
		switch {
		case ws.Exited() || ws.Signaled():
			u.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			if !read {
				return u, fmt.Errorf("%s ended (status %v) without an exit stop", path, ws)
			}
			if ws.Signaled() {
				return u, fmt.Errorf("%s %v: killed by %v", path, args[1:], ws.Signal())
			}
			if ws.ExitStatus() != 0 {
				return u, fmt.Errorf("%s %v: exit status %d", path, args[1:], ws.ExitStatus())
			}
			return u, nil
		case ws.Stopped() && ws.TrapCause() == syscall.PTRACE_EVENT_EXIT:
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				return Usage{}, fmt.Errorf("read the status of %s at its exit: %w", path, err)
			}
			if u.PeakRSS, u.RSS, u.AnonRSS, err = ParseStatus(status); err != nil {
				return Usage{}, fmt.Errorf("%s at its exit: %w", path, err)
			}
			read = true
		case ws.Stopped() && ws.StopSignal() != syscall.SIGTRAP:
			// A signal for the tracee (the Go runtime's SIGURG, ...):
			// deliver it.
			signal = int(ws.StopSignal())
		}
	}
}
