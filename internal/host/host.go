// Package host is the narrow interface between the node agents and the
// machine they run on. Everything that touches the host (boot ID, uptime,
// reboot, npu-smi, host paths) goes through Host so that the same agent code
// runs on a real node (Linux) and on a simulated one in tests (simhost).
package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/utils/clock"
)

// RebootMethod selects how a reboot is triggered.
type RebootMethod string

const (
	// RebootSystemd asks the host's logind, over its D-Bus system bus, to
	// reboot as `systemctl reboot` does: logind lets its delay inhibitors
	// (the kubelet's graceful node shutdown) finish, then has systemd
	// start reboot.target, so services stop cleanly and filesystems are
	// synced. Where no logind is on the bus it asks systemd directly.
	RebootSystemd RebootMethod = "systemd"
	// RebootSysrq triggers an immediate kernel reboot; for hosts whose
	// userspace is too wedged for systemd to finish a shutdown.
	RebootSysrq RebootMethod = "sysrq"
)

// rebootSystemctl is the name RebootSystemd had when it ran `systemctl
// reboot` through nsenter; still accepted so that old --method flags and
// values keep working.
const rebootSystemctl = "systemctl"

// ParseRebootMethod validates a user-supplied reboot method and returns its
// canonical value; "systemctl" is accepted as an alias of RebootSystemd.
func ParseRebootMethod(s string) (RebootMethod, error) {
	switch m := RebootMethod(s); m {
	case RebootSystemd, RebootSysrq:
		return m, nil
	case rebootSystemctl:
		return RebootSystemd, nil
	default:
		return "", fmt.Errorf("unknown reboot method %q: use %q or %q", s, RebootSystemd, RebootSysrq)
	}
}

// Host is what a node agent may ask of its machine.
type Host interface {
	// BootID identifies the current boot; it changes on every reboot.
	BootID() (string, error)
	// Uptime is the time since the current boot.
	Uptime() (time.Duration, error)
	// Reboot asks the machine to reboot. On success it returns before the
	// reboot happens; the caller must not assume it survives long after.
	Reboot(ctx context.Context, method RebootMethod) error
	// NPUSMI runs the vendor tool `npu-smi` with args and returns its
	// standard output. A non-zero exit is an *ExitError carrying the output.
	NPUSMI(ctx context.Context, args ...string) ([]byte, error)
	// LoadedDriver is the NPU driver version in the running kernel, ""
	// when no driver is loaded.
	LoadedDriver(ctx context.Context) (string, error)
	// InstallDriver runs the vendor install command argv to install
	// driver version. On a host with no driver loaded the installer loads
	// it too; over a loaded driver it installs the files and the next boot
	// loads them.
	InstallDriver(ctx context.Context, version string, argv []string) error
	// Path maps an absolute path on the host (such as /run/npu-stack) to
	// where this process reaches it.
	Path(hostPath string) string
}

// TreeHost is a host whose driver comes as an installed tree from the
// driver image (drivertree.ModeTree): read-only roots such as KubeOS.
type TreeHost interface {
	// InstalledTree is the version of the driver tree on disk, "" when
	// none is installed, and whether the tree is whole (holds what tree
	// mode loads).
	InstalledTree() (version string, whole bool, err error)
	// InstallTree replaces the driver tree with imageTree, whole or not
	// at all; it loads nothing.
	InstallTree(ctx context.Context, version, imageTree string) error
	// LoadTree loads the installed tree's modules; it returns those it
	// loaded and the optional ones that failed, with the reason.
	LoadTree(ctx context.Context) (loaded, skipped []string, err error)
}

// ExitError is a host command that ran and exited non-zero.
type ExitError struct {
	Command string
	Code    int
	Output  []byte
	// Stderr is the command's standard error, where the dynamic loader
	// reports a missing library.
	Stderr []byte
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("%s exited with code %d", e.Command, e.Code)
}

// IsExitError reports whether err is, or wraps, an *ExitError.
func IsExitError(err error) (*ExitError, bool) {
	var ee *ExitError
	ok := errors.As(err, &ee)
	return ee, ok
}

// Clocked is a host that keeps its own wall clock rather than the
// process's: a simulated machine whose clock is set off, as a real one's
// may be, to test that nothing compares times across machines.
type Clocked interface {
	Clock() clock.WithTicker
}

// ClockOf is h's wall clock: its own if it keeps one, else the real time.
func ClockOf(h Host) clock.WithTicker {
	if c, ok := h.(Clocked); ok {
		return c.Clock()
	}
	return clock.RealClock{}
}

// ProblemError is the host failing the host contract (docs/host-contract.md):
// npu-smi missing or unable to load its libraries, no driver installed, a
// read-only driver path, D-Bus refused by a security module. It is not a
// chip fault: it must never be taken for a wedge or answered with a reboot,
// which cannot fix it. What says what is wrong, Fix what an operator does
// about it; both are in words an operator can act on.
type ProblemError struct {
	What string
	Fix  string
	Err  error
}

func (e *ProblemError) Error() string {
	msg := "host problem: " + e.What
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Fix != "" {
		msg += "; fix: " + e.Fix
	}
	return msg
}

func (e *ProblemError) Unwrap() error { return e.Err }

// IsProblem reports whether err is, or wraps, a *ProblemError.
func IsProblem(err error) (*ProblemError, bool) {
	var pe *ProblemError
	ok := errors.As(err, &pe)
	return pe, ok
}
