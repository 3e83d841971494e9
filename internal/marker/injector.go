package marker

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

const (
	nriFile     = "nri-injector"
	nriLockFile = "nri-injector.lock"
)

// Injector returns the name the NRI injector registered under; ok is true
// only while the process that registered lives. A file alone would outlive
// an injector killed with SIGKILL (an OOM kill, the kubelet's kill after
// the grace period) and keep the device plugin advertising chips no
// container could get the driver for; the lock it holds (flock(2)) is
// released by the kernel whenever that process ends, however it ends.
func (d Dir) Injector() (string, bool, error) {
	name, ok, err := d.read(nriFile)
	if err != nil || !ok {
		return "", false, err
	}
	alive, err := d.injectorAlive()
	if err != nil || !alive {
		return "", false, err
	}
	return name, true, nil
}

// injectorAlive tests the injector's lock without waiting: a shared lock
// that cannot be taken means the injector holds its exclusive one. The
// file is opened read-only, so a read-only mount of the directory (the
// device plugin's) is enough.
func (d Dir) injectorAlive() (bool, error) {
	f, err := os.Open(d.file(nriLockFile))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("marker %s: %w", nriLockFile, err)
	}
	defer func() { _ = f.Close() }()
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); {
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("marker %s: test the injector's lock: %w", nriLockFile, err)
	}
	return false, nil // our shared lock goes with the close
}

// HoldInjector records that this process registered with the runtime as
// name, for as long as it lives or until release is called. It waits for
// an injector that still holds the lock (the pod being replaced, in its
// termination grace period).
func (d Dir) HoldInjector(name string) (release func(), err error) {
	if err := os.MkdirAll(d.Path, 0o755); err != nil {
		return nil, fmt.Errorf("marker directory: %w", err)
	}
	f, err := os.OpenFile(d.file(nriLockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("marker %s: %w", nriLockFile, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("marker %s: lock: %w", nriLockFile, err)
	}
	if err := d.write(nriFile, name); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		_ = d.remove(nriFile)
		_ = f.Close()
	}, nil
}

// ClearInjector removes the injector's record, as a starting injector
// does before it registers; a missing one is not an error.
func (d Dir) ClearInjector() error { return d.remove(nriFile) }
