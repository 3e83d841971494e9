package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// waitBuild waits for the background build of what ("engines": the
// deployers, or "nodes": the real nodes' binaries) that `make test` runs
// beside the tests (ci/test.sh holds an exclusive flock on
// $NPU_STACK_BUILD_DIR/build-<what>.lock until it ends) and reports its
// failure. Without that variable (go test run by hand) there is nothing to
// wait for.
func waitBuild(what string) error {
	dir := os.Getenv("NPU_STACK_BUILD_DIR")
	if dir == "" {
		return nil
	}
	lock := filepath.Join(dir, "build-"+what+".lock")
	f, err := os.Open(lock)
	if err != nil {
		return fmt.Errorf("open the build lock %s (NPU_STACK_BUILD_DIR): %w", lock, err)
	}
	defer func() { _ = f.Close() }() // read-only: nothing to flush
	// Blocks until the build has ended; the lock goes with the file.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		return fmt.Errorf("wait for the build (flock %s): %w", lock, err)
	}
	log := filepath.Join(dir, "build-"+what+".log")
	rc, err := os.ReadFile(filepath.Join(dir, "build-"+what+".rc"))
	if err != nil {
		return fmt.Errorf("the background build (make %s) left no exit code: %w; its log: %s", what, err, log)
	}
	if code := strings.TrimSpace(string(rc)); code != "0" {
		return fmt.Errorf("the background build (make %s) failed with exit code %s: see %s, or run `make %s`", what, code, log, what)
	}
	return nil
}
