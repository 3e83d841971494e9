package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"
)

// InstallLockFile serialises the driver pods of one host: an old pod
// finishing its install during its grace period and its replacement
// (a chart upgrade, a deleted pod) never run the installer, or judge the
// tree, at the same time. A lock of the kernel's, so a process that dies
// releases it.
const InstallLockFile = StagingDir + "/.lock"

// LockInstall takes the host's install lock, waiting while another
// process holds it; waiting is reported through waiting (once). It polls,
// since flock(2) cannot be interrupted by ctx. The returned func releases
// the lock.
func LockInstall(ctx context.Context, path func(string) string, clk clock.Clock, waiting func(error)) (func(), error) {
	file := path(InstallLockFile)
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return nil, fmt.Errorf("install lock %s: %w", InstallLockFile, err)
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("install lock %s: %w", InstallLockFile, err)
	}
	told := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("install lock %s: %w", InstallLockFile, err)
		}
		if !told && waiting != nil {
			waiting(fmt.Errorf("another driver pod on this host holds %s (its install is finishing)", InstallLockFile))
			told = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, ctx.Err()
		case <-clk.After(time.Second):
		}
	}
}
