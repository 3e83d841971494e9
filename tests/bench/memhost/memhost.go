// Package memhost is a simulated NPU machine kept in memory. The
// directory-backed simhost shares one machine between a harness and agent
// processes through files and locks; a fleet simulator playing 5,000 nodes
// in one process needs neither, and the file I/O would dominate the
// benchmark, so this host implements host.Host on a mutex instead.
package memhost

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

// Host is one simulated machine. The zero value is not usable; use New.
type Host struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	st    simhost.State
}

var _ host.Host = (*Host)(nil)

// New boots a machine described by spec at clk.Now().
func New(spec simhost.Spec, clk clock.PassiveClock) *Host {
	return &Host{clock: clk, st: simhost.State{
		BootID: NewBootID(), BootTime: clk.Now(), Chip: spec.Chip, ChipCount: spec.ChipCount, LoadedDriver: spec.Driver,
	}}
}

// NewBootID returns a random boot ID in the kernel's format.
func NewBootID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// State returns a copy of the machine's state.
func (h *Host) State() simhost.State {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st
}

func (h *Host) BootID() (string, error) { return h.State().BootID, nil }

func (h *Host) Uptime() (time.Duration, error) {
	return h.clock.Since(h.State().BootTime), nil
}

// Reboot records the request; the simulator carries it out with
// CompleteReboot once the simulated reboot time has passed.
func (h *Host) Reboot(_ context.Context, method host.RebootMethod) error {
	if _, err := host.ParseRebootMethod(string(method)); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.st.RebootRequest = method
	return nil
}

// RebootPending reports whether a reboot was asked for and not carried out.
func (h *Host) RebootPending() bool { return h.State().RebootRequest != "" }

// CompleteReboot carries out a requested reboot: new boot ID and boot
// time, no driver loaded, wedges gone. It reports whether one was pending.
func (h *Host) CompleteReboot() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.st.RebootRequest == "" {
		return false
	}
	h.st.RebootRequest = ""
	h.st.Reboots++
	h.st.BootID = NewBootID()
	h.st.BootTime = h.clock.Now()
	h.st.LoadedDriver = ""
	if !h.st.StickyWedge {
		h.st.Wedged = nil
	}
	return true
}

// WedgeForever wedges every chip with a fault a reboot does not fix.
func (h *Host) WedgeForever() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.st.StickyWedge = true
	h.st.Wedged = nil
	for c := 0; c < h.st.ChipCount; c++ {
		h.st.Wedged = append(h.st.Wedged, c)
	}
}

func (h *Host) NPUSMI(ctx context.Context, args ...string) ([]byte, error) {
	return simhost.RunSMI(ctx, h.State(), args...)
}

func (h *Host) LoadedDriver(context.Context) (string, error) { return h.State().LoadedDriver, nil }

// InstallDriver loads version; like the real chips, a loaded driver is
// never replaced without a reboot.
func (h *Host) InstallDriver(_ context.Context, version string, argv []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if version == "" {
		return fmt.Errorf("memhost: install of an empty driver version")
	}
	if h.st.LoadedDriver != "" && h.st.LoadedDriver != version {
		return fmt.Errorf("memhost: driver %s already loaded, cannot load %s without a reboot", h.st.LoadedDriver, version)
	}
	h.st.LoadedDriver = version
	h.st.Installs++
	h.st.LastInstallCommand = argv
	return nil
}

// Path maps host paths under a root that does not exist: nothing in the
// fleet simulator reads host files (markers are modelled by the loaded
// driver), and a stray read must fail rather than touch this machine.
func (h *Host) Path(hostPath string) string {
	return filepath.Join("/nonexistent/memhost", hostPath)
}
