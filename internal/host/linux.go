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
// host's root filesystem mounted at Root (hostPID for the reboot).
type Linux struct {
	// Root is where the host's / is mounted in this container ("/" when the
	// agent runs directly on the host).
	Root string
	// NPUSMIPath is the npu-smi binary, resolved under Root.
	NPUSMIPath string
	// DriverVersionFile is the version the loaded kernel module reports,
	// resolved under Root; absent when no driver is loaded.
	DriverVersionFile string
}

// NewLinux returns the Host of the machine this process runs on, with the
// host filesystem mounted at root.
func NewLinux(root string) *Linux {
	if root == "" {
		root = "/"
	}
	return &Linux{Root: root, NPUSMIPath: "/usr/local/bin/npu-smi", DriverVersionFile: "/sys/module/drv_davinci_host/version"}
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

func (l *Linux) Reboot(ctx context.Context, method RebootMethod) error {
	switch method {
	case RebootSystemd:
		// Enter PID 1's namespaces (the pod runs with hostPID) so systemd
		// of the host, not of the container, performs the reboot.
		return l.run(ctx, "nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--", "systemctl", "reboot")
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

func (l *Linux) run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &ExitError{Command: name + " " + strings.Join(args, " "), Code: ee.ExitCode(), Output: out}
	}
	if err != nil {
		return fmt.Errorf("run %s: %w", name, err)
	}
	return nil
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
