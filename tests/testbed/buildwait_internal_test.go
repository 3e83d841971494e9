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
// holds the build lock, then goes on when the build succeeded and fails
// naming the log when it did not.
func TestWaitBuild(t *testing.T) {
	dir := t.TempDir()
	lock, rc := filepath.Join(dir, "build.lock"), filepath.Join(dir, "build.rc")
	t.Setenv("NPU_STACK_BUILD_LOCK", lock)
	f, err := os.Create(lock)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	var released atomic.Bool
	done := make(chan error)
	go func() {
		err := waitBuild()
		if !released.Load() {
			err = errors.New("waitBuild returned while the build still held its lock")
		}
		done <- err
	}()
	// Go on once the kernel shows the waiter blocked on the lock (a "->"
	// line of /proc/locks for its inode); returning first fails above.
	st, err := os.Stat(lock)
	if err != nil {
		t.Fatal(err)
	}
	ino := fmt.Sprintf(":%d ", st.Sys().(*syscall.Stat_t).Ino)
	for blocked := false; !blocked; {
		select {
		case err := <-done:
			t.Fatalf("waitBuild returned while the build held its lock: %v", err)
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
	if err := os.WriteFile(rc, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	released.Store(true)
	if err := f.Close(); err != nil { // the build ends: its lock goes with the file
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("after a build that succeeded: %v", err)
	}

	if err := os.WriteFile(rc, []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := waitBuild(); err == nil || !strings.Contains(err.Error(), "exit code 2") || !strings.Contains(err.Error(), filepath.Join(dir, "build.log")) {
		t.Errorf("after a failed build: %v, want the exit code and the log named", err)
	}
	if err := os.Remove(rc); err != nil {
		t.Fatal(err)
	}
	if err := waitBuild(); err == nil || !strings.Contains(err.Error(), "no exit code") {
		t.Errorf("after a build that left no exit code: %v", err)
	}
	t.Setenv("NPU_STACK_BUILD_LOCK", "")
	if err := waitBuild(); err != nil {
		t.Errorf("with no background build (go test by hand): %v", err)
	}
}
