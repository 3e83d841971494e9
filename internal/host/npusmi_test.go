package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// recorder is a Runner that records what it was asked to run.
type recorder struct {
	got  []Exec
	out  string
	fail error
}

func (r *recorder) run(_ context.Context, e Exec) ([]byte, error) {
	r.got = append(r.got, e)
	return []byte(r.out), r.fail
}

func TestNPUSMIPathSearchOrder(t *testing.T) {
	const tools = DefaultDriverRoot + "/tools/npu-smi"
	for _, tc := range []struct {
		name    string
		present []string
		flag    string
		want    string
	}{
		{"both installer paths", []string{"/usr/local/bin/npu-smi", "/usr/local/sbin/npu-smi", tools}, "", "/usr/local/sbin/npu-smi"},
		{"bin only", []string{"/usr/local/bin/npu-smi", tools}, "", "/usr/local/bin/npu-smi"},
		{"driver tree only (precompiled image)", []string{tools}, "", tools},
		{"flag wins", []string{"/usr/local/sbin/npu-smi", "/opt/npu-smi"}, "/opt/npu-smi", "/opt/npu-smi"},
		{"nothing", nil, "", ""},
		{"flag names a missing file", []string{"/usr/local/sbin/npu-smi"}, "/opt/npu-smi", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{}
			for _, p := range tc.present {
				files[p] = "#!"
			}
			writeTree(t, root, files)
			l := NewLinux(root)
			l.NPUSMIPath = tc.flag
			got, err := l.FindNPUSMI()
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("NPUSMIPath = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			pe, ok := IsProblem(err)
			if !ok || !strings.Contains(pe.What, "npu-smi not found") || pe.Fix == "" {
				t.Fatalf("NPUSMIPath = %q, %v; want a *ProblemError with a fix", got, err)
			}
		})
	}
}

// The runner gets the host root to chroot into, the host path of npu-smi
// and LD_LIBRARY_PATH of the driver tree the flags name (KubeOS here).
func TestNPUSMIRunsInHostRoot(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"/var/lib/Ascend/driver/tools/npu-smi": "#!"})
	r := &recorder{out: "table"}
	l := NewLinux(root)
	l.DriverRoot, l.Run = "/var/lib/Ascend/driver", r.run
	out, err := l.NPUSMI(context.Background(), "info")
	if err != nil || string(out) != "table" || len(r.got) != 1 {
		t.Fatalf("NPUSMI = %q, %v after %d runs", out, err, len(r.got))
	}
	e := r.got[0]
	if e.Root != root || e.Path != "/var/lib/Ascend/driver/tools/npu-smi" || strings.Join(e.Args, " ") != "info" {
		t.Errorf("ran %+v", e)
	}
	wantLD := "LD_LIBRARY_PATH=/var/lib/Ascend/driver/lib64/driver:/var/lib/Ascend/driver/lib64/common:/var/lib/Ascend/driver/lib64:/usr/local/dcmi"
	if !contains(e.Env, wantLD) || !contains(e.Env, "PATH="+hostPATH) {
		t.Errorf("env %q, want %q and the host PATH", e.Env, wantLD)
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// What the runner reports decides between a host problem (no reboot can
// fix it) and a failure the health-watch counts.
func TestNPUSMIFailureKinds(t *testing.T) {
	loader := "npu-smi: error while loading shared libraries: libdrvdsmi_host.so: cannot open shared object file: No such file or directory\n"
	for _, tc := range []struct {
		name    string
		fail    error
		problem bool
	}{
		{"loader error", &ExitError{Command: "npu-smi info", Code: 127, Stderr: []byte(loader)}, true},
		{"exit 127", &ExitError{Command: "npu-smi info", Code: 127}, true},
		{"ELF interpreter missing", fmt.Errorf("start npu-smi: %w", os.ErrNotExist), true},
		// What exec reports when the child's chroot is refused: a
		// container not running as root has no CAP_SYS_CHROOT.
		{"chroot refused", &fs.PathError{Op: "fork/exec", Path: "/usr/local/bin/npu-smi", Err: syscall.EPERM}, true},
		{"dcmi init failed (-8005)", &ExitError{Command: "npu-smi info", Code: 187, Output: []byte("dcmi module initialize failed. ret is -8005\n")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, map[string]string{"/usr/local/bin/npu-smi": "#!"})
			l := NewLinux(root)
			l.Run = (&recorder{fail: tc.fail}).run
			_, err := l.NPUSMI(context.Background(), "info")
			pe, isProblem := IsProblem(err)
			if isProblem != tc.problem {
				t.Fatalf("NPUSMI error %v: host problem %v, want %v", err, isProblem, tc.problem)
			}
			if !tc.problem {
				if _, ok := IsExitError(err); !ok {
					t.Fatalf("NPUSMI error %v: want the *ExitError for the caller to judge", err)
				}
				return
			}
			wantFix := "driver.hostDriverPath"
			if tc.name == "chroot refused" {
				wantFix = "runAsUser: 0"
			}
			if !strings.Contains(pe.Error(), "/usr/local/bin/npu-smi") || !strings.Contains(pe.Fix, wantFix) {
				t.Errorf("problem %q does not name the binary and the fix (%s)", pe, wantFix)
			}
			if tc.name == "loader error" && !strings.Contains(pe.What, "libdrvdsmi_host.so") {
				t.Errorf("problem %q does not quote the loader", pe.What)
			}
		})
	}
}

func compile(t *testing.T, dir, name, src string, args ...string) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc not found (%v): install the Debian package gcc (with libc6-dev); this test runs real binaries through the real loader", err)
	}
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	if out, err := exec.Command(cc, append([]string{"-o", bin, c}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", name, err, out)
	}
	return bin
}

// ExecRunner really chroots: a static npu-smi stand-in sees the host
// root as / and the environment NPUSMI gives it.
func TestExecRunnerChroots(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("chroot needs root (CAP_SYS_CHROOT), as the driver pod's containers have; CI runs as root")
	}
	const src = `#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(void) {
	printf("%s %d\n", getenv("LD_LIBRARY_PATH"), access("/etc/host-marker", F_OK) == 0);
	return 0;
}
`
	bin := compile(t, t.TempDir(), "npu-smi", src, "-static")
	root := t.TempDir()
	writeTree(t, root, map[string]string{"/etc/host-marker": ""})
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, root, map[string]string{"/usr/local/sbin/npu-smi": string(b)})
	if err := os.Chmod(filepath.Join(root, "/usr/local/sbin/npu-smi"), 0o555); err != nil {
		t.Fatal(err)
	}
	out, err := NewLinux(root).NPUSMI(context.Background(), "info")
	want := "/usr/local/Ascend/driver/lib64/driver:/usr/local/Ascend/driver/lib64/common:/usr/local/Ascend/driver/lib64:/usr/local/dcmi 1\n"
	if err != nil || string(out) != want {
		t.Fatalf("npu-smi in the host root printed %q, %v; want %q", out, err, want)
	}
}

// A dynamically linked npu-smi whose driver library is gone fails in the
// real loader: a host problem quoting it.
func TestExecRunnerLoaderError(t *testing.T) {
	dir := t.TempDir()
	lib := compile(t, dir, "libdrvdsmi_host.so", "int dsmi(void) { return 0; }\n", "-shared", "-fPIC")
	bin := compile(t, dir, "npu-smi", "int dsmi(void);\nint main(void) { return dsmi(); }\n", "-L"+dir, "-ldrvdsmi_host")
	_ = lib
	if err := os.Remove(filepath.Join(dir, "libdrvdsmi_host.so")); err != nil {
		t.Fatal(err)
	}
	l := NewLinux("/")
	l.NPUSMIPath = bin
	_, err := l.NPUSMI(context.Background(), "info")
	pe, ok := IsProblem(err)
	if !ok || !strings.Contains(pe.What, "libdrvdsmi_host.so") || !strings.Contains(pe.What, LoaderError) {
		t.Fatalf("NPUSMI with a missing library: %v; want a *ProblemError quoting the loader", err)
	}
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 127 {
		t.Errorf("cause %v: want exit 127", err)
	}
}

// A streamed program's output is kept only as a tail: an installer that
// prints without end (a question it gets no answer to) cannot fill the
// pod's memory, and its last words still reach the error.
func TestExecRunnerKeepsTheTailOfAStreamedOutput(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "installer.sh")
	body := "#!/bin/sh\ni=0\nwhile [ $i -lt 20000 ]; do echo \"Do you want to continue? [y/n]\"; i=$((i+1)); done\necho '[ERROR]last words'\necho 'to stderr' >&2\nexit 1\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	var streamed bytes.Buffer
	_, err := ExecRunner(context.Background(), Exec{Root: "/", Path: script, Env: []string{"PATH=/usr/bin:/bin"}, Output: &streamed})
	ee, ok := IsExitError(err)
	if !ok {
		t.Fatalf("got %v; want an exit error", err)
	}
	if len(ee.Output) > OutputTail || !strings.HasSuffix(string(ee.Output), "[ERROR]last words\n") || string(ee.Stderr) != "to stderr\n" {
		t.Fatalf("kept %d bytes ending %q, stderr %q", len(ee.Output), ee.Output[max(0, len(ee.Output)-40):], ee.Stderr)
	}
	if streamed.Len() < 20000*30 {
		t.Fatalf("streamed only %d bytes", streamed.Len())
	}
}
