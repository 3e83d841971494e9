package deviceplugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Held keeps open the device nodes of the chips a stand-in serves, as the
// vendor's device plugin and npu-exporter do while they run: they use the
// chips through DCMI in-process, whose dcmi_init opens
// /dev/davinci_manager and whose device handles open /dev/davinci<N>.
// While they are open the vendor's installer refuses to install over the
// loaded driver (hicann/driver v8.5.0 driver_install.sh
// check_boot_status; installer/driver.run.sh check_holders), so the
// product has to stop these pods first, as on a real node.
type Held struct {
	devDir string

	mu    sync.Mutex
	files map[string]*os.File // by device name
}

// NewHeld holds nothing yet; devDir is where the device nodes are (the
// host's /dev, which the chart mounts at /dev).
func NewHeld(devDir string) *Held {
	return &Held{devDir: devDir, files: map[string]*os.File{}}
}

// Hold keeps davinci_manager and each chip's davinci<phy ID> open and
// closes the nodes of chips no longer listed. It opens read-write, as DCMI
// does; what it could not open is returned, the rest is held.
func (h *Held) Hold(chips []Chip) error {
	want := map[string]bool{"davinci_manager": true}
	for _, c := range chips {
		want[fmt.Sprintf("davinci%d", c.PhyID)] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for name, f := range h.files {
		if !want[name] {
			errs = append(errs, f.Close())
			delete(h.files, name)
		}
	}
	for name := range want {
		if h.files[name] != nil {
			continue
		}
		f, err := os.OpenFile(filepath.Join(h.devDir, name), os.O_RDWR, 0)
		if err != nil {
			errs = append(errs, fmt.Errorf("hold the device node: %w", err))
			continue
		}
		h.files[name] = f
	}
	return errors.Join(errs...)
}

// Close closes every held node.
func (h *Held) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for name, f := range h.files {
		errs = append(errs, f.Close())
		delete(h.files, name)
	}
	return errors.Join(errs...)
}
