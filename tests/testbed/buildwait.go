package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// waitBuild waits for the background build of the deployers and the real
// nodes' binaries that `make test` runs beside the tests (ci/test.sh holds
// an exclusive flock on $NPU_STACK_BUILD_LOCK until it ends) and reports
// its failure. Without that variable (go test run by hand) there is
// nothing to wait for.
func waitBuild() error {
	lock := os.Getenv("NPU_STACK_BUILD_LOCK")
	if lock == "" {
		return nil
	}
	f, err := os.Open(lock)
	if err != nil {
		return fmt.Errorf("open the build lock %s (NPU_STACK_BUILD_LOCK): %w", lock, err)
	}
	defer func() { _ = f.Close() }() // read-only: nothing to flush
	// Blocks until the build has ended; the lock goes with the file.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		return fmt.Errorf("wait for the build (flock %s): %w", lock, err)
	}
	log := filepath.Join(filepath.Dir(lock), "build.log")
	rc, err := os.ReadFile(filepath.Join(filepath.Dir(lock), "build.rc"))
	if err != nil {
		return fmt.Errorf("the background build (make engines nodes) left no exit code: %w; its log: %s", err, log)
	}
	if code := strings.TrimSpace(string(rc)); code != "0" {
		return fmt.Errorf("the background build (make engines nodes) failed with exit code %s: see %s, or run `make engines nodes`", code, log)
	}
	return nil
}
