// Package marker keeps the per-boot files of the driver pod in the marker
// directory (driver.markerDir, /run/npu-stack by default, emptied by every
// reboot):
//
//   - driver-ready (contract.MarkerFile): the driver is loaded and usable;
//     it holds the loaded version. The readiness probe, the device plugin's
//     gate and the validator read it.
//   - chips-at-load: how many chips npu-smi showed right after the driver
//     loaded, the default count a later probe must still see.
//   - wedged: the health-watch took driver-ready away because the chips
//     wedged, so it (not the driver entry) restores it if they recover.
//   - loaded-version: the driver version loaded in this boot, read once
//     from the host before any install: the vendor installer rewrites
//     version.info when it installs over a loaded driver, while the old
//     modules stay loaded until the reboot.
//   - staged-version: a version the driver pod installed over the loaded
//     one in this boot, which the next boot loads.
//   - install-hold: the driver pod stopped everything of ours that holds
//     the chips for an install in this boot; it holds the version being
//     installed. The health-watch pauses its probes while it exists, and
//     driver-ready is not written again before the reboot, so the device
//     plugin's and exporter's replacements wait in their gate.
//   - nri-injector and nri-injector.lock: the NRI injector
//     (internal/nriinject) is registered with the container runtime, and
//     the process that registered still lives (injector.go). The device
//     plugin waits for it before it starts and is restarted when it goes,
//     so no chip is advertised while workloads cannot get the driver's
//     user space.
//
// Files, not memory, because the containers that write and read them restart
// independently, and /run being per boot gives the right lifetime for free.
package marker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fsnotify/fsnotify"

	"github.com/openfuyao/npu-stack/internal/atomicfile"
	"github.com/openfuyao/npu-stack/internal/contract"
)

const (
	chipsFile  = "chips-at-load"
	wedgedFile = "wedged"
	loadedFile = "loaded-version"
	stagedFile = "staged-version"
	holdFile   = "install-hold"
)

// Dir is the marker directory as this process reaches it (already mapped
// through host.Host.Path).
type Dir struct{ Path string }

func (d Dir) file(name string) string { return filepath.Join(d.Path, name) }

// ReadyFile is the path of the driver-ready marker.
func (d Dir) ReadyFile() string { return d.file(contract.MarkerFile) }

// Ready returns the version the marker holds and whether it exists.
func (d Dir) Ready() (string, bool, error) {
	b, err := os.ReadFile(d.ReadyFile())
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read driver-ready marker: %w", err)
	}
	return strings.TrimSpace(string(b)), true, nil
}

// SetReady writes the marker for the loaded driver version.
func (d Dir) SetReady(version string) error {
	return d.write(contract.MarkerFile, version)
}

// ClearReady removes the marker; a missing marker is not an error.
func (d Dir) ClearReady() error { return d.remove(contract.MarkerFile) }

// Wedged reports whether the health-watch recorded a wedge in this boot.
func (d Dir) Wedged() (bool, error) {
	_, err := os.Stat(d.file(wedgedFile))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read wedge record: %w", err)
	}
	return true, nil
}

// RecordWedge notes the wedge, with a reason for whoever looks at the host.
func (d Dir) RecordWedge(reason string) error { return d.write(wedgedFile, reason) }

// ClearWedge removes the wedge record.
func (d Dir) ClearWedge() error { return d.remove(wedgedFile) }

// ChipsAtLoad returns the recorded chip count, ok false when none is.
func (d Dir) ChipsAtLoad() (int, bool, error) {
	b, err := os.ReadFile(d.file(chipsFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read chip count at driver load: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("chip count at driver load in %s is %q, not a number; delete the file to re-learn it at the next driver load", d.file(chipsFile), b)
	}
	return n, true, nil
}

// SetChipsAtLoad records the chip count seen right after the driver loaded.
func (d Dir) SetChipsAtLoad(n int) error { return d.write(chipsFile, strconv.Itoa(n)) }

// Loaded returns the driver version recorded as loaded in this boot, ok
// false when none is.
func (d Dir) Loaded() (string, bool, error) { return d.read(loadedFile) }

// SetLoaded records the driver version loaded in this boot.
func (d Dir) SetLoaded(version string) error { return d.write(loadedFile, version) }

// Staged returns the version installed over the loaded driver in this
// boot, ok false when none was.
func (d Dir) Staged() (string, bool, error) { return d.read(stagedFile) }

// SetStaged records a version installed over the loaded driver.
func (d Dir) SetStaged(version string) error { return d.write(stagedFile, version) }

// Hold returns the version whose install holds the chips in this boot,
// ok false when none does.
func (d Dir) Hold() (string, bool, error) { return d.read(holdFile) }

// SetHold records that the chips are held for the install of version.
func (d Dir) SetHold(version string) error { return d.write(holdFile, version) }

// ClearHold removes the hold; a missing one is not an error.
func (d Dir) ClearHold() error { return d.remove(holdFile) }

func (d Dir) read(name string) (string, bool, error) {
	b, err := os.ReadFile(d.file(name))
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read marker %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), true, nil
}

func (d Dir) write(name, content string) error {
	if err := os.MkdirAll(d.Path, 0o755); err != nil {
		return fmt.Errorf("marker directory: %w", err)
	}
	if err := atomicfile.Write(d.file(name), []byte(content+"\n"), 0o644); err != nil {
		return fmt.Errorf("marker %s: %w", name, err)
	}
	return nil
}

func (d Dir) remove(name string) error {
	if err := os.Remove(d.file(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove marker %s: %w", name, err)
	}
	return nil
}

// Changes signals (coalesced) every change in the directory until ctx
// ends, so waiters react to the marker at once instead of at their next
// poll. It fails if the directory does not exist; callers then poll.
func (d Dir) Changes(ctx context.Context) (<-chan struct{}, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch marker directory %s: %w", d.Path, err)
	}
	if err := w.Add(d.Path); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("watch marker directory %s: %w", d.Path, err)
	}
	ch := make(chan struct{}, 1)
	go func() {
		defer func() { _ = w.Close() }()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				select {
				case ch <- struct{}{}:
				default:
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	return ch, nil
}
