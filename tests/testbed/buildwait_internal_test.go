package testbed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestWaitBuild: a test that needs the deployers waits while ci/test.sh
// holds their build's lock, then goes on when the build succeeded and
// fails naming the log when it did not; the nodes' build, still under way,
// does not hold it up.
func TestWaitBuild(t *testing.T) {
	dir := t.TempDir()
	lock, rc := filepath.Join(dir, "build-engines.lock"), filepath.Join(dir, "build-engines.rc")
	t.Setenv("NPU_STACK_BUILD_DIR", dir)
	f, err := os.Create(lock)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	nodes, err := os.Create(filepath.Join(dir, "build-nodes.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = nodes.Close() }()
	if err := syscall.Flock(int(nodes.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var released atomic.Bool
	done := make(chan error)
	go func() {
		err := waitBuild("engines")
		if !released.Load() {
			err = errors.New("waitBuild returned while the build still held its lock")
		}
		done <- err
	}()
	waitBlocked(t, lock, done, "waitBuild did not wait")
	if err := os.WriteFile(rc, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	released.Store(true)
	if err := f.Close(); err != nil { // the build ends: its lock goes with the file
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("after a build that succeeded (the nodes' still under way): %v", err)
	}

	if err := os.WriteFile(rc, []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := waitBuild("engines"); err == nil || !strings.Contains(err.Error(), "exit code 2") || !strings.Contains(err.Error(), filepath.Join(dir, "build-engines.log")) {
		t.Errorf("after a failed build: %v, want the exit code and the log named", err)
	}
	if err := os.Remove(rc); err != nil {
		t.Fatal(err)
	}
	if err := waitBuild("engines"); err == nil || !strings.Contains(err.Error(), "no exit code") {
		t.Errorf("after a build that left no exit code: %v", err)
	}
	t.Setenv("NPU_STACK_BUILD_DIR", "")
	if err := waitBuild("engines"); err != nil {
		t.Errorf("with no background build (go test by hand): %v", err)
	}
}

// TestProductBuildsTakeTurns: test binaries started at once build the
// product binaries one at a time, so that only the first compiles on a
// cold Go cache.
func TestProductBuildsTakeTurns(t *testing.T) {
	root := t.TempDir()
	first, err := lockProductBuild(root)
	if err != nil {
		t.Fatal(err)
	}
	var released atomic.Bool
	done := make(chan error)
	go func() {
		unlock, err := lockProductBuild(root)
		if err == nil {
			unlock()
			if !released.Load() {
				err = errors.New("a second build started while the first held the lock")
			}
		}
		done <- err
	}()
	waitBlocked(t, filepath.Join(root, ".cache", "product-build.lock"), done, "the second lockProductBuild did not wait")
	released.Store(true)
	first()
	if err := <-done; err != nil {
		t.Fatalf("after the first build: %v", err)
	}
}

// waitBlocked returns once the kernel shows a waiter blocked on the flock
// of path (a "->" line of /proc/locks for its inode); done receiving first
// fails the test with early.
func waitBlocked(t *testing.T, path string, done <-chan error, early string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	ino := fmt.Sprintf(":%d ", st.Sys().(*syscall.Stat_t).Ino)
	for blocked := false; !blocked; {
		select {
		case err := <-done:
			t.Fatalf("%s: %v", early, err)
		default:
		}
		locks, err := os.ReadFile("/proc/locks")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(locks), "\n") {
			blocked = blocked || strings.Contains(l, "->") && strings.Contains(l, ino)
		}
		runtime.Gosched()
	}
}
