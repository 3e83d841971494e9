package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Linux is the Host of a real node. The agent runs in a container with the
// host's root filesystem mounted at Root and, for RebootSystemd, the host's
// D-Bus system bus socket mounted at DBusSocket.
type Linux struct {
	// Root is where the host's / is mounted in this container ("/" when the
	// agent runs directly on the host).
	Root string
	// NPUSMIPath is the npu-smi binary, resolved under Root.
	NPUSMIPath string
	// DriverVersionFile is the version the loaded kernel module reports,
	// resolved under Root; absent when no driver is loaded.
	DriverVersionFile string
	// DBusSocket is the host's D-Bus system bus socket as this process
	// reaches it (not resolved under Root); RebootSystemd talks to the
	// host's systemd through it.
	DBusSocket string
	// SystemdTimeout bounds a RebootSystemd request: connecting to the bus
	// and systemd's answer. Zero means DefaultSystemdTimeout.
	SystemdTimeout time.Duration
}

// NewLinux returns the Host of the machine this process runs on, with the
// host filesystem mounted at root.
func NewLinux(root string) *Linux {
	if root == "" {
		root = "/"
	}
	return &Linux{Root: root, NPUSMIPath: "/usr/local/bin/npu-smi", DriverVersionFile: "/sys/module/drv_davinci_host/version", DBusSocket: DefaultDBusSocket}
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
// asks the host's systemd over the D-Bus system bus for a clean shutdown,
// as `systemctl reboot` does; no host binary is run, so the image needs
// nothing but this program.
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
		return systemdReboot(ctx, socket, l.SystemdTimeout)
	case RebootSysrq:
		if err := os.WriteFile("/proc/sys/kernel/sysrq", []byte("1"), 0); err != nil {
			return fmt.Errorf("enable sysrq: %w", err)
		}
		if err := os.WriteFile("/proc/sysrq-trigger", []byte("b"), 0); err != nil {
			return fmt.Errorf("trigger sysrq reboot: %w", err)
		}
		return nil
	default:
		return fmt.Errorf("unknown reboot method %q", method)
	}
}

func (l *Linux) NPUSMI(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, l.Path(l.NPUSMIPath), args...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	err := cmd.Run()
	if ctx.Err() != nil {
		return stdout.Bytes(), fmt.Errorf("npu-smi %s: %w", strings.Join(args, " "), ctx.Err())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return stdout.Bytes(), &ExitError{Command: "npu-smi " + strings.Join(args, " "), Code: ee.ExitCode(), Output: stdout.Bytes()}
	}
	if err != nil {
		return nil, fmt.Errorf("run npu-smi: %w", err)
	}
	return stdout.Bytes(), nil
}

func (l *Linux) LoadedDriver(_ context.Context) (string, error) {
	b, err := os.ReadFile(l.Path(l.DriverVersionFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read loaded driver version: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// InstallDriver runs the vendor's install command with the version in
// NPU_DRIVER_VERSION; its output goes to this process's output, which is
// the driver pod's log.
func (l *Linux) InstallDriver(ctx context.Context, version string, argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("install driver %s: no install command given", version)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "NPU_DRIVER_VERSION="+version)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &ExitError{Command: strings.Join(argv, " "), Code: ee.ExitCode()}
	}
	if err != nil {
		return fmt.Errorf("install driver %s: %w", version, err)
	}
	return nil
}
