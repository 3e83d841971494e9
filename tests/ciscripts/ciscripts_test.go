// Package ciscripts tests the shell scripts every newcomer's first run
// goes through: ci/prereqs.sh, which must refuse a machine that lacks a
// prerequisite in seconds (not after a 19-minute build) and name the
// command that fixes it, and ci/progress.sh, which must keep a long build
// from looking hung. No control plane: they run under make check.
package ciscripts_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the checkout: this package is tests/ciscripts.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// pathWithout is a directory of links to every command on PATH but
// drop, for a PATH that lacks it and has everything else; readable by
// anyone, for runs as another user.
func pathWithout(t *testing.T, drop ...string) string {
	t.Helper()
	// Not t.TempDir(): its parent is private to this user.
	dir, err := os.MkdirTemp("", "ciscripts-path-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	skip := map[string]bool{}
	for _, d := range drop {
		skip[d] = true
	}
	for _, p := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(p)
		if err != nil {
			continue // a PATH entry that does not exist
		}
		for _, e := range entries {
			link := filepath.Join(dir, e.Name())
			if skip[e.Name()] {
				continue
			}
			if _, err := os.Lstat(link); err == nil {
				continue // an earlier PATH entry's wins, as in a lookup
			}
			if err := os.Symlink(filepath.Join(p, e.Name()), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// run runs a script of the checkout with env added to this process's,
// as uid (-1: this process's user), and returns its combined output,
// its exit code and how long it took.
func run(t *testing.T, uid int, env []string, args ...string) (string, int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", args...)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), env...)
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0, took
	case errors.As(err, &exit):
		return string(out), exit.ExitCode(), took
	}
	t.Fatalf("bash %v: %v\n%s", args, err, out)
	return "", 0, 0
}

// TestPrereqsNameTheFix: on a machine without gcc, make demo's check
// fails within seconds and names the apt-get command that installs it
// (--check: as root it would install it instead). Without root it also
// says that the real nodes need root and how to run the demo without
// them; without them the demo needs Go alone.
func TestPrereqsNameTheFix(t *testing.T) {
	noGCC := "PATH=" + pathWithout(t, "gcc")
	out, code, took := run(t, -1, []string{noGCC}, "ci/prereqs.sh", "--check", "demo")
	if code == 0 {
		t.Fatalf("ci/prereqs.sh --check demo without gcc on PATH exited 0:\n%s", out)
	}
	if took > 10*time.Second {
		t.Errorf("ci/prereqs.sh took %s: the check must come before any build, in seconds", took)
	}
	if !regexp.MustCompile(`(?m)^fix: (sudo )?apt-get install (\S+ )*gcc( |$)`).MatchString(out) {
		t.Errorf("ci/prereqs.sh without gcc does not name `apt-get install gcc`:\n%s", out)
	}

	// The other checks, as a user who is not root: nobody when this test
	// runs as root.
	uid := -1
	if os.Geteuid() == 0 {
		uid = 65534
	}
	out, code, _ = run(t, uid, []string{noGCC}, "ci/prereqs.sh", "demo")
	if code == 0 {
		t.Fatalf("ci/prereqs.sh demo as a user who is not root exited 0:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^fix: sudo apt-get install (\S+ )*gcc( |$)`).MatchString(out) {
		t.Errorf("a user who is not root is not told to sudo apt-get install gcc:\n%s", out)
	}
	for _, want := range []string{"need root", "make demo DEMO_REAL_NODES=0", `sudo env "PATH=$PATH" make demo`} {
		if !strings.Contains(out, want) {
			t.Errorf("a user who is not root is not told %q:\n%s", want, out)
		}
	}
	out, code, _ = run(t, uid, []string{noGCC, "DEMO_REAL_NODES=0"}, "ci/prereqs.sh", "demo")
	if code != 0 || strings.Contains(out, "gcc") || strings.Contains(out, "root") {
		t.Errorf("DEMO_REAL_NODES=0: the demo needs neither gcc nor root, but ci/prereqs.sh exited %d:\n%s", code, out)
	}

	out, code, _ = run(t, -1, []string{noGCC}, "ci/prereqs.sh", "--check", "everything")
	if code != 2 || !strings.Contains(out, "usage:") {
		t.Errorf("an unknown target: exit %d, want 2 with the usage:\n%s", code, out)
	}
}

// TestProgressHeartbeat: a step prints what it runs as n/m, a line while
// it runs, its time at the end, and its command's exit code; it returns
// when its command does (no heartbeat left holding the output open).
func TestProgressHeartbeat(t *testing.T) {
	out, code, took := run(t, -1, []string{"PROGRESS_EVERY=1"}, "ci/progress.sh", "2", "5", "napping", "sleep", "2.5")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{"[2/5] napping\n", "[2/5] napping: still running, ", "[2/5] napping: done in "} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if took > 5*time.Second {
		t.Errorf("a 2.5 s step took %s: something held its output open", took)
	}
	// A step that ends at once, while its heartbeat may still be
	// starting: the heartbeat's 30 s sleep must not keep the output open.
	out, code, took = run(t, -1, []string{"PROGRESS_EVERY=30"}, "ci/progress.sh", "1", "1", "failing", "bash", "-c", "exit 3")
	if code != 3 || !strings.Contains(out, "[1/1] failing: FAILED after ") {
		t.Errorf("a failing step: exit %d, want 3 and FAILED:\n%s", code, out)
	}
	if took > 5*time.Second {
		t.Errorf("a step that failed at once took %s: its heartbeat held the output open", took)
	}
}

// TestPrereqsRefuseAChroot: in a chroot the mount namespace's root is the
// host's /, where the real nodes' exec probes would land; make demo's
// check refuses it, naming how to enter a root as a machine, and passes
// once the same root is entered with pivot_root. The root is a tmpfs
// holding this machine's /usr, /etc, /dev, /proc and the checkout, built
// in a mount namespace of the test's own (a user namespace too when the
// test does not run as root).
func TestPrereqsRefuseAChroot(t *testing.T) {
	repo := repoRoot(t)
	root := t.TempDir()
	build := `set -e
R=$1 REPO=$2 ENTER=$3
mount -t tmpfs tmpfs "$R"
for d in usr etc dev proc tmp; do mkdir -p "$R/$d"; done
for d in usr etc dev proc; do mount --rbind "/$d" "$R/$d"; done
for l in bin lib lib64 sbin; do [ -e "/$l" ] && ln -s "usr/$l" "$R/$l"; done
mkdir -p "$R$REPO" && mount --bind "$REPO" "$R$REPO"
if [ "$ENTER" = pivot ]; then
	cd "$R" && mkdir .old && pivot_root . .old && cd /
	exec bash "$REPO/ci/prereqs.sh" --check demo
fi
exec chroot "$R" bash "$REPO/ci/prereqs.sh" --check demo`
	flags := []string{"--mount", "--propagation", "private"}
	if os.Geteuid() != 0 {
		flags = append(flags, "--user", "--map-root-user")
	}
	for _, enter := range []string{"chroot", "pivot"} {
		args := append(append([]string{}, flags...), "bash", "-c", build, "build", root, repo, enter)
		out, err := exec.Command("unshare", args...).CombinedOutput()
		refused := strings.Contains(string(out), "need / to be the root of this mount namespace")
		switch {
		case enter == "chroot" && (err == nil || !refused || !strings.Contains(string(out), "pivot_root") || !strings.Contains(string(out), "DEMO_REAL_NODES=0")):
			t.Errorf("a chroot: %v, want a refusal naming pivot_root and DEMO_REAL_NODES=0:\n%s", err, out)
		case enter == "pivot" && refused:
			t.Errorf("a root entered with pivot_root was refused as a chroot (%v):\n%s", err, out)
		}
	}
}

// TestMakeTestProgress: ci/test.sh, make test's runner, prints a line at
// least every PROGRESS_EVERY seconds while go test runs (go test prints a
// package's result only when the package ends) with the packages done
// and each background build's current step, read from the build's log.
// go and make are stand-ins, and the test moves them on only once it has
// read the line it waits for: a make whose build step goes on until
// released, and a go that lists three packages, starts a test binary,
// reports one package, and reports the next once the builds are released
// and done.
func TestMakeTestProgress(t *testing.T) {
	bin, cache := t.TempDir(), t.TempDir()
	release := filepath.Join(cache, "release")
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/usr/bin/env bash\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("go", `case $1 in
list) printf 'ex/a\nex/b\nex/c\n' ;;
test)
	# a test binary of package ex/b, running until the end
	"$(dirname "$0")/b.test" 60 &
	trap 'kill $!' EXIT
	printf 'ok  \tex/a\t0.1s\n'
	until [[ -f $NPU_STACK_BUILD_DIR/build-nodes.rc && -f `+release+`.2 ]]; do sleep 0.1; done
	printf '?   \tex/b\t[no test files]\n'
	exit 1 ;;
esac
`)
	write("make", `echo "[2/6] building Argo CD"
until [[ -f `+release+` ]]; do sleep 0.1; done
echo "[2/6] building Argo CD: done in 2 s"
`)
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sleep, filepath.Join(bin, "b.test")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "ci/test.sh", cache, "./...")
	cmd.Dir = repoRoot(t)
	// At the timeout the whole group goes, the stand-ins holding the
	// output open among them: a runner that never prints the line the
	// test waits for fails the test, not hangs it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	// No ps: a debootstrap minbase root has none.
	cmd.Env = append(os.Environ(), "PATH="+pathWithout(t, "ps"), "PROGRESS_EVERY=1", "GO="+filepath.Join(bin, "go"), "MAKE="+filepath.Join(bin, "make"))
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Each line the runner must print, and what the test then lets the
	// stand-ins do.
	steps := []struct {
		line *regexp.Regexp
		then string
	}{
		{regexp.MustCompile(`^make test: \d+ s, test packages reported: 1 of 3; running: b; engines \[2/6\] building Argo CD; nodes waiting$`), release},
		{regexp.MustCompile(`^make test: \d+ s, test packages reported: 1 of 3; running: b; engines built; nodes built$`), release + ".2"},
		{regexp.MustCompile(`^make test: go test ended after \d+ s \(exit 1\)`), ""},
	}
	var seen []string
	sc := bufio.NewScanner(pipe)
	for sc.Scan() && len(steps) > 0 {
		seen = append(seen, sc.Text())
		if !steps[0].line.MatchString(sc.Text()) {
			continue
		}
		if steps[0].then != "" {
			if err := os.WriteFile(steps[0].then, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		steps = steps[1:]
	}
	_, _ = io.Copy(io.Discard, pipe)
	err = cmd.Wait()
	if len(steps) > 0 {
		t.Fatalf("no line matching %s in:\n%s", steps[0].line, strings.Join(seen, "\n"))
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("go test failed with 1: ci/test.sh ended with %v, want exit 1", err)
	}
	if log, err := os.ReadFile(filepath.Join(cache, "test.log")); err != nil || !strings.Contains(string(log), "ex/b") {
		t.Errorf("go test's output is not in test.log (%v): %q", err, log)
	}
}
