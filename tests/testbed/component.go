package testbed

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// component is one control-plane process. It dies with the test binary
// (Pdeathsig) so a crashed or killed test leaves no stray servers behind.
type component struct {
	name    string
	bin     string
	args    []string
	logDir  string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
}

func startComponent(name, bin string, args []string, logDir string) (*component, error) {
	logPath := filepath.Join(logDir, name+".log")
	// Appended: a restarted component keeps its earlier log.
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	c := &component{name: name, bin: bin, args: args, logDir: logDir, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(c.done)
	}()
	return c, nil
}

// exited reports whether the process has ended, with its log tail.
func (c *component) exited() error {
	select {
	case <-c.done:
		return fmt.Errorf("%s exited (%w); last log lines:\n%s", c.name, c.waitErr, tail(c.logPath, 20))
	default:
		return nil
	}
}

// stop asks the process group to terminate and kills it after grace.
func (c *component) stop(grace time.Duration) error {
	select {
	case <-c.done:
		return nil
	default:
	}
	pgid := -c.cmd.Process.Pid
	if err := syscall.Kill(pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s: %w", c.name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-c.done:
		return nil
	case <-timer.C:
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-c.done
		return nil
	}
}

// kill ends the process group with SIGKILL at once, as an OOM kill or a
// lost node does: no graceful shutdown.
func (c *component) kill() error {
	select {
	case <-c.done:
		return nil
	default:
	}
	if err := syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s: %w", c.name, err)
	}
	<-c.done
	return nil
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	n := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n++
			if n > lines {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}
