package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Linux is the Host of a real node. The agent runs in a container with the
// host's root filesystem mounted at Root (the chart mounts it at /host) and
// every host path (driver tree, npu-smi, markers) is resolved under Root.
type Linux struct {
	// Root is where the host's / is mounted in this container ("/" when the
	// agent runs directly on the host).
	Root string
	// NPUSMIPath is the --npu-smi flag: npu-smi as a host path; empty
	// searches NPUSMIPaths, then <DriverRoot>/tools/npu-smi.
	NPUSMIPath string
	// DriverRoot is the driver tree as a host path (driver.hostDriverPath);
	// empty means DefaultDriverRoot.
	DriverRoot string
	// Run runs host programs (npu-smi); nil means ExecRunner. The
	// simulated host hands in one that answers from its state, so the
	// path and environment logic above it is the production one.
	Run Runner
	// DBusSocket is the host's D-Bus system bus socket as this process
	// reaches it (not resolved under Root); RebootSystemd talks to the
	// host's logind, or its systemd where logind is absent, through it.
	DBusSocket string
	// SystemdTimeout bounds a RebootSystemd request: connecting to the bus
	// and the answers of logind and systemd. Zero means
	// DefaultSystemdTimeout.
	SystemdTimeout time.Duration
	// ReadOnly reports whether a host path is on a read-only filesystem;
	// nil means statfs(2). The simulated host models KubeOS's /usr with it.
	ReadOnly func(hostPath string) (bool, error)
	// Sysrq is how RebootSysrq reaches the kernel; nil means the real
	// sync(2) and /proc files.
	Sysrq *Sysrq
}

// NewLinux returns the Host of the machine this process runs on, with the
// host filesystem mounted at root.
func NewLinux(root string) *Linux {
	if root == "" {
		root = "/"
	}
	return &Linux{Root: root, DriverRoot: DefaultDriverRoot, DBusSocket: DefaultDBusSocket}
}

func (l *Linux) Path(hostPath string) string { return filepath.Join(l.Root, hostPath) }

// BootID reads the kernel's boot ID, which is per boot and not per
// container, so /proc of the container is as good as the host's.
func (l *Linux) BootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read boot ID: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (l *Linux) Uptime() (time.Duration, error) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, fmt.Errorf("read uptime: %w", err)
	}
	return parseProcUptime(string(b))
}

func parseProcUptime(s string) (time.Duration, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return 0, fmt.Errorf("parse /proc/uptime: empty")
	}
	secs, err := strconv.ParseFloat(fields[0], 64)
	if err != nil || secs < 0 {
		return 0, fmt.Errorf("parse /proc/uptime %q: not a number of seconds", fields[0])
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// Reboot asks the host to reboot. RebootSystemd (or its alias systemctl)
// asks over the D-Bus system bus for a clean shutdown as `systemctl
// reboot` does: logind first, so that its delay inhibitors (the kubelet's
// graceful node shutdown) run, systemd where no logind is on the bus. No
// host binary is run, so the image needs nothing but this program.
func (l *Linux) Reboot(ctx context.Context, method RebootMethod) error {
	m, err := ParseRebootMethod(string(method))
	if err != nil {
		return err
	}
	switch m {
	case RebootSystemd:
		socket := l.DBusSocket
		if socket == "" {
			socket = DefaultDBusSocket
		}
		return busReboot(ctx, socket, l.SystemdTimeout)
	case RebootSysrq:
		return l.Sysrq.Reboot()
	default:
		return fmt.Errorf("unknown reboot method %q", method)
	}
}
