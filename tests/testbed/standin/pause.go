package standin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// PauseDir is where the stand-in driver package looks for the test bed's
// pause (installer/driver.run.sh pause_point): a directory of the node's
// control area, not a path the product reads.
const PauseDir = "/var/lib/npu-stack-testbed/installer-pause"

// InstallerPause stops stand-in driver packages run on one node where a
// real installer can be killed half-way: after the old package is removed
// (no version.info, no Driver_Install_Status=complete) and before the new
// one is copied. Every installer run while it exists stops there, writes
// its PID and waits for Release; a test that never releases models a hung
// installer.
//
// The installer talks to it through two FIFOs, so neither side polls.
// The test bed keeps both open read-write for its lifetime: the
// installer's write of its PID then never blocks on a test that is not
// reading yet, and its read of release blocks until Release writes a line
// instead of seeing end of file, however the two race.
type InstallerPause struct {
	dir     string
	reached *os.File
	lines   *bufio.Reader
	release *os.File
}

// NewInstallerPause creates the pause on a node whose paths at maps to
// where the test reaches them (realnode.Node.Path, or a directory's
// filepath.Join). FIFOs left by an earlier pause are replaced.
func NewInstallerPause(at func(string) string) (*InstallerPause, error) {
	dir := at(PauseDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("installer pause: %w", err)
	}
	p := &InstallerPause{dir: dir}
	for _, f := range []struct {
		name string
		file **os.File
	}{{"reached", &p.reached}, {"release", &p.release}} {
		path := filepath.Join(dir, f.name)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			_ = p.close()
			return nil, fmt.Errorf("installer pause: remove the old %s: %w", f.name, err)
		}
		if err := unix.Mkfifo(path, 0o600); err != nil {
			_ = p.close()
			return nil, fmt.Errorf("installer pause: mkfifo %s: %w", path, err)
		}
		// O_RDWR never blocks on a FIFO (Linux fifo(7)); the Go runtime
		// polls the descriptor, so reads honour deadlines.
		fh, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			_ = p.close()
			return nil, fmt.Errorf("installer pause: %w", err)
		}
		*f.file = fh
	}
	p.lines = bufio.NewReader(p.reached)
	return p, nil
}

// Reached waits until an installer stops at the pause and returns its PID
// as the installer sees it (in the node's PID namespace: kill it there).
// It returns ctx's error when ctx ends first; a later Reached still gets
// the next installer.
func (p *InstallerPause) Reached(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("installer pause: waiting for an installer: %w", err)
	}
	// A deadline in the past wakes the blocked read when ctx ends.
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = p.reached.SetReadDeadline(time.Unix(1, 0))
		close(fired)
	})
	line, err := p.lines.ReadString('\n')
	if !stop() {
		// The deadline is being set: clear it only once it is.
		<-fired
	}
	if cerr := p.reached.SetReadDeadline(time.Time{}); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			err = ctx.Err()
		}
		return 0, fmt.Errorf("installer pause: waiting for an installer: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, fmt.Errorf("installer pause: the installer wrote %q, not its PID: %w", line, err)
	}
	return pid, nil
}

// Release lets one paused installer go on; called before an installer
// reaches the pause, it lets the next one through without stopping long.
func (p *InstallerPause) Release() error {
	if _, err := p.release.WriteString("release\n"); err != nil {
		return fmt.Errorf("installer pause: release: %w", err)
	}
	return nil
}

// Remove deletes the pause: later installers do not stop, and one
// stopped now goes on (its read of release ends).
func (p *InstallerPause) Remove() error {
	err := os.RemoveAll(p.dir)
	if cerr := p.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("installer pause: remove: %w", err)
	}
	return nil
}

func (p *InstallerPause) close() error {
	var errs []error
	for _, f := range []*os.File{p.reached, p.release} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}
