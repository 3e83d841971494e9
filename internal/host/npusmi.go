package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// NPUSMIPaths are where the vendor installer puts npu-smi, in the order
// npu-stack looks: /usr/local/sbin and /usr/local/bin (hicann/driver
// v8.5.0, scripts/package/custom/driver/ascend910B/driver_atlas.xml l.38-39,
// install_path="/usr/local/bin" and "/usr/local/sbin", mode 555). A
// precompiled driver image that keeps its tree off /usr (KubeOS) has it
// at <driver-root>/tools/npu-smi instead (docs/host-contract.md, ANO-UPG,
// "Verify the new driver"), looked at last.
var NPUSMIPaths = []string{"/usr/local/sbin/npu-smi", "/usr/local/bin/npu-smi"}

// npuSMILibDirs are the driver's library directories npu-smi loads from,
// relative to the driver root: libdcmi, libdrvdsmi_host, libascend_hal,
// libdsmi_network in lib64/driver, libc_sec and libmmpa in lib64/common
// (hicann/driver main, src/custom/dev_prod/user/npucli/CMakeLists.txt
// target_link_libraries(npu-smi ...); v8.5.0 driver.xml). The installer's
// loader configuration lists lib64/common, lib64/driver and lib64
// (scripts/package/custom/driver/common/scripts/host_servers_setup.sh
// so_ldconfig()), the same directories.
var npuSMILibDirs = []string{"lib64/driver", "lib64/common", "lib64"}

// DCMIDir also holds libdcmi.so (driver_atlas.xml l.17,
// install_path="/usr/local/dcmi"); MindCluster's exporter image searches it
// too (Ascend/mind-cluster v7.3.0,
// component/npu-exporter/build/Dockerfile ENV LD_LIBRARY_PATH).
const DCMIDir = "/usr/local/dcmi"

// hostPATH is the PATH a program run inside the host root gets: the host's
// own directories, not this container's.
const hostPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Exec is one host program to run.
type Exec struct {
	// Root is the host's / as this process reaches it; the program runs
	// with it as its root directory (chroot) unless it is "/".
	Root string
	// Path is the program, a host path (inside Root).
	Path string
	Args []string
	// Env is the program's whole environment.
	Env []string
	// Output, if set, gets stdout and stderr as they come (an installer's
	// log) instead of their being kept for the result.
	Output io.Writer
}

// Runner runs e and returns its standard output. A non-zero exit is an
// *ExitError carrying stdout and stderr; a program that cannot be started
// is an error wrapping the cause (fs.ErrNotExist for a missing program or
// ELF interpreter).
type Runner func(ctx context.Context, e Exec) ([]byte, error)

// StopGrace is how long a program stopped by its context has between
// SIGTERM and SIGKILL.
const StopGrace = 10 * time.Second

// ExecRunner runs e as a child process, chrooted into e.Root so that the
// host's glibc, loader and ld.so.cache serve a host binary such as
// npu-smi, as upstream's containerised installer runs host tools
// (`chroot /HOST_ROOT_TO_CONTAINER/ ...`, hicann/driver v8.5.0,
// scripts/package/driver/common/scripts/install_npudrv.sh).
//
// The program runs in a process group of its own. When ctx ends, the whole
// group gets SIGTERM and, StopGrace later, SIGKILL: an installer is a
// shell script whose children (tar, cp, depmod) must stop with it, not
// run on as orphans over the driver tree. Callers that must not cut a
// program short (an install) pass a ctx that SIGTERM of this process does
// not end.
func ExecRunner(ctx context.Context, e Exec) ([]byte, error) {
	cmd := exec.CommandContext(ctx, e.Path, e.Args...)
	cmd.Env = e.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if e.Root != "" && e.Root != "/" {
		cmd.SysProcAttr.Chroot = e.Root
		cmd.Dir = "/"
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = StopGrace
	defer func() {
		// Stopped: whatever of the group outlived its leader, or ignored
		// SIGTERM, goes too. A program that ended by itself keeps what it
		// started.
		if cmd.Process != nil && ctx.Err() != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var outTail, errTail *tailBuffer
	if e.Output != nil {
		// Streamed, and only its tail kept for the error: the installer's
		// last words say why it failed, and an installer that repeats a
		// question it gets no answer to (upstream's ver_check.sh without
		// --quiet) must not fill the pod's memory.
		outTail, errTail = &tailBuffer{max: OutputTail}, &tailBuffer{max: OutputTail}
		cmd.Stdout, cmd.Stderr = io.MultiWriter(e.Output, outTail), io.MultiWriter(e.Output, errTail)
	}
	err := cmd.Run()
	if outTail != nil {
		stdout.Write(outTail.Bytes())
		stderr.Write(errTail.Bytes())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return stdout.Bytes(), &ExitError{Command: command(e), Code: ee.ExitCode(), Output: stdout.Bytes(), Stderr: stderr.Bytes()}
	}
	if err != nil {
		return stdout.Bytes(), fmt.Errorf("start %s: %w", command(e), err)
	}
	return stdout.Bytes(), nil
}

func command(e Exec) string { return strings.TrimSpace(e.Path + " " + strings.Join(e.Args, " ")) }

// OutputTail is how much of a streamed program's output (an installer's)
// is kept for its error, per stream.
const OutputTail = 64 << 10

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.b = append(t.b[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.b) + len(p) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	t.b = append(t.b, p...)
	return n, nil
}

func (t *tailBuffer) Bytes() []byte { return t.b }

// LoaderError is what the dynamic loader prints when a library is
// missing; the process then exits 127.
const LoaderError = "error while loading shared libraries"

// FindNPUSMI is the npu-smi this host runs, as a host path: the configured
// one if set, else the first of NPUSMIPaths and <driver-root>/tools/npu-smi
// that exists. None there is a host problem.
func (l *Linux) FindNPUSMI() (string, error) {
	candidates := l.npuSMICandidates()
	for _, p := range candidates {
		fi, err := os.Stat(l.Path(p))
		if err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	what := fmt.Sprintf("npu-smi not found at %s under the host root %s", strings.Join(candidates, ", "), l.Root)
	if l.NPUSMIPath != "" {
		return "", &ProblemError{What: what, Fix: "point --npu-smi (healthWatch.npuSMIPath) at the host's npu-smi, or leave it empty to search the vendor's install paths"}
	}
	return "", &ProblemError{What: what, Fix: "install the NPU driver on the node (its installer puts npu-smi into /usr/local/bin and /usr/local/sbin), or check that driver.hostDriverPath (or the node's driver.profiles[].hostDriverPath) is the driver tree holding tools/npu-smi"}
}

func (l *Linux) npuSMICandidates() []string {
	if l.NPUSMIPath != "" {
		return []string{l.NPUSMIPath}
	}
	return append(append([]string{}, NPUSMIPaths...), filepath.Join(l.driverRoot(), "tools", "npu-smi"))
}

// NPUSMIEnv is npu-smi's environment: the host PATH and LD_LIBRARY_PATH
// with the driver's library directories and /usr/local/dcmi, as ANO-UPG
// (docs/host-contract.md) runs it on KubeOS (LD_LIBRARY_PATH=<driver>/lib64/driver:<driver>/lib64/common).
func (l *Linux) NPUSMIEnv() []string {
	dirs := make([]string, 0, len(npuSMILibDirs)+1)
	for _, d := range npuSMILibDirs {
		dirs = append(dirs, filepath.Join(l.driverRoot(), d))
	}
	dirs = append(dirs, DCMIDir)
	return []string{"PATH=" + hostPATH, "LD_LIBRARY_PATH=" + strings.Join(dirs, ":")}
}

// NPUSMI runs the host's npu-smi. A missing binary, one that cannot start
// or cannot load its libraries (exit 127) is a host problem, never a chip
// fault; any other non-zero exit is an *ExitError for the caller to judge.
func (l *Linux) NPUSMI(ctx context.Context, args ...string) ([]byte, error) {
	path, err := l.FindNPUSMI()
	if err != nil {
		return nil, err
	}
	run := l.Run
	if run == nil {
		run = ExecRunner
	}
	e := Exec{Root: l.Root, Path: path, Args: args, Env: l.NPUSMIEnv()}
	out, err := run(ctx, e)
	if ctx.Err() != nil {
		return out, fmt.Errorf("%s: %w", command(e), ctx.Err())
	}
	if err == nil {
		return out, nil
	}
	fix := fmt.Sprintf("npu-smi needs the driver libraries in %s and %s: check that driver.hostDriverPath (or the node's driver.profiles[].hostDriverPath) is the host's driver tree and that the driver installed completely (reinstall it if not)",
		strings.Join(npuSMILibDirs, ", "), DCMIDir)
	if ee, ok := IsExitError(err); ok {
		// The loader writes to stderr; a wrapper script may fold it into
		// stdout, so both are read.
		msg := firstLine(ee.Stderr)
		if msg == "" {
			msg = firstLine(ee.Output)
		}
		if ee.Code == 127 || strings.Contains(string(ee.Stderr), LoaderError) || strings.Contains(string(ee.Output), LoaderError) {
			return out, &ProblemError{What: fmt.Sprintf("%s (host root %s) cannot run: exit %d: %s", path, l.Root, ee.Code, msg), Fix: fix, Err: err}
		}
		return out, err
	}
	if errors.Is(err, syscall.EPERM) && e.Root != "" && e.Root != "/" {
		// The child's chroot was refused: privileged: true gives a
		// non-root process no effective capabilities, so CAP_SYS_CHROOT
		// is missing, whatever the driver libraries are.
		return out, &ProblemError{What: fmt.Sprintf("%s cannot be run chrooted into the host root %s: %v", path, l.Root, err),
			Fix: "the container that runs npu-smi must run as root (securityContext runAsUser: 0) with CAP_SYS_CHROOT; privileged: true alone gives a non-root user no capabilities", Err: err}
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOEXEC) {
		return out, &ProblemError{What: fmt.Sprintf("%s (host root %s) cannot be started (the binary or its ELF interpreter is missing or not executable)", path, l.Root), Fix: fix, Err: err}
	}
	return out, err
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}
