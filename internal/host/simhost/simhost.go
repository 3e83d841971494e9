// Package simhost is a simulated NPU machine kept in a directory, so that a
// test harness and the agent processes it starts share one host: the agents
// see it through host.Host (selected by the NPU_STACK_SIM_HOST variable), the
// harness drives it (wedge a chip, break npu-smi, complete a reboot).
//
// Every change goes through a file lock and an atomic rename, because the
// harness and several agent processes read and write it concurrently.
package simhost

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/openfuyao/npu-stack/internal/host"
)

// SMIMode is how the simulated npu-smi behaves.
type SMIMode string

const (
	SMINormal SMIMode = ""     // table generated from the chips
	SMIHang   SMIMode = "hang" // never returns until the caller gives up
	SMIFail   SMIMode = "fail" // exits non-zero like a driver that lost its chips
	SMIRaw    SMIMode = "raw"  // prints State.SMIOutput verbatim
	// SMIStuck is npu-smi in uninterruptible sleep on a wedged device: it
	// ignores the caller's cancellation as the real one ignores SIGKILL,
	// and returns (failing) only once the harness sets another mode.
	SMIStuck SMIMode = "stuck"
)

// State is the whole simulated machine.
type State struct {
	BootID    string    `json:"bootID"`
	BootTime  time.Time `json:"bootTime"`
	Reboots   int       `json:"reboots"`
	Chip      string    `json:"chip"`      // e.g. 910b, 310p
	ChipCount int       `json:"chipCount"` // chips physically present
	// LoadedDriver is the driver version in the running kernel; empty
	// after boot until a driver is installed and loaded.
	LoadedDriver string `json:"loadedDriver"`
	// InstalledDriver is the complete driver package on disk, which boot
	// loads: the modules the installer left under /lib/modules/<kernel>/
	// updates (docs/host-contract.md section 2). Empty when none is.
	InstalledDriver string `json:"installedDriver,omitempty"`
	// Wedged chips report Health Critical until the next reboot (or
	// forever with StickyWedge, a fault a reboot does not fix).
	Wedged      []int   `json:"wedged,omitempty"`
	StickyWedge bool    `json:"stickyWedge,omitempty"`
	SMIMode     SMIMode `json:"smiMode,omitempty"`
	SMIOutput   string  `json:"smiOutput,omitempty"`
	SMIExitCode int     `json:"smiExitCode,omitempty"`
	// RebootRequest is the method of a reboot asked for and not yet
	// carried out by the harness.
	RebootRequest host.RebootMethod `json:"rebootRequest,omitempty"`
	// RebootFailure, when set, makes Reboot fail with this message, like
	// a reboot refused by the host's systemd.
	RebootFailure string `json:"rebootFailure,omitempty"`
	// DriverRoot is where the installer puts the driver tree (a host
	// path); empty means DriverRoot.
	DriverRoot string `json:"driverRoot,omitempty"`
	// ReadOnly are host paths on read-only filesystems, such as /usr on
	// KubeOS.
	ReadOnly []string `json:"readOnly,omitempty"`
	// InstallFailure, when set, makes the next install fail half-way with
	// this message (exit 1), leaving a partial tree and no loaded driver.
	InstallFailure string `json:"installFailure,omitempty"`
	// Installs counts driver installs, across boots.
	Installs           int      `json:"installs,omitempty"`
	LastInstallCommand []string `json:"lastInstallCommand,omitempty"`
}

// baseDirs are made in every simulated root.
var baseDirs = []string{"/dev", "/etc", "/lib/modules", "/run", "/sys/module", "/usr/local/bin", "/usr/local/sbin", "/var/lib"}

// Spec describes a machine to create.
type Spec struct {
	Chip      string
	ChipCount int
	// Driver, if set, is already loaded at first boot (a node whose
	// driver was installed before npu-stack).
	Driver string
	// DriverRoot is where the driver tree goes (default DriverRoot).
	DriverRoot string
	// ReadOnly are host paths on read-only filesystems (KubeOS: /usr).
	ReadOnly []string
}

func (st State) driverRoot() string {
	if st.DriverRoot == "" {
		return DriverRoot
	}
	return st.DriverRoot
}

// Host is a simulated machine rooted at Dir. It implements host.Host;
// host paths, the loaded driver, npu-smi's location and environment and
// the driver install's preconditions are answered by the production
// host.Linux over Dir/root, whose only simulated parts are the programs
// it runs (npu-smi, the installer) and which filesystems are read-only.
type Host struct {
	Dir   string
	clock func() time.Time
	linux host.Linux
}

var _ host.Host = (*Host)(nil)

// Create makes a freshly booted machine in dir.
func Create(dir string, spec Spec) (*Host, error) {
	if spec.ChipCount < 0 {
		return nil, fmt.Errorf("simulated host %s: negative chip count %d", dir, spec.ChipCount)
	}
	// The directories every Linux root has, so that a check walking up
	// a path (such as the read-only check) meets them as on a node.
	for _, d := range baseDirs {
		if err := os.MkdirAll(filepath.Join(dir, "root", d), 0o755); err != nil {
			return nil, fmt.Errorf("create simulated host %s: %w", dir, err)
		}
	}
	h := Open(dir)
	st := State{BootID: newBootID(), BootTime: h.clock(), Chip: spec.Chip, ChipCount: spec.ChipCount, LoadedDriver: spec.Driver,
		InstalledDriver: spec.Driver, DriverRoot: spec.DriverRoot, ReadOnly: spec.ReadOnly}
	if spec.DriverRoot != "" {
		h.linux.DriverRoot = spec.DriverRoot
	}
	if spec.Driver != "" {
		if err := h.installFiles(st, spec.Driver); err != nil {
			return nil, err
		}
		if err := h.loadModules(); err != nil {
			return nil, err
		}
		if err := h.createDevices(st); err != nil {
			return nil, err
		}
	}
	if err := h.write(&st); err != nil {
		return nil, err
	}
	return h, nil
}

// Open attaches to an existing simulated machine, as an agent with the
// default flags (driver tree host.DefaultDriverRoot, npu-smi searched).
func Open(dir string) *Host {
	flags := host.NewLinux("/")
	h := OpenAs(dir, flags)
	if st, err := h.State(); err == nil {
		h.linux.DriverRoot = st.driverRoot()
	}
	return h
}

// OpenAs attaches to an existing simulated machine as an agent whose
// flags configured flags (--driver-root, --npu-smi): the production
// host.Linux with those settings runs over the machine's root, so an agent
// pointed at a path the machine does not have fails as on a real node.
func OpenAs(dir string, flags *host.Linux) *Host {
	h := &Host{Dir: dir, clock: time.Now}
	h.linux = host.Linux{
		Root:       filepath.Join(dir, "root"),
		NPUSMIPath: flags.NPUSMIPath,
		DriverRoot: flags.DriverRoot,
		Run:        h.run,
		ReadOnly:   h.readOnly,
	}
	return h
}

func (h *Host) statePath() string { return filepath.Join(h.Dir, "state.json") }

// State returns a snapshot of the machine.
func (h *Host) State() (State, error) {
	var st State
	err := h.withLock(syscall.LOCK_SH, func() error {
		var err error
		st, err = h.read()
		return err
	})
	return st, err
}

// Update changes the machine under its lock.
func (h *Host) Update(change func(*State) error) error {
	return h.withLock(syscall.LOCK_EX, func() error {
		st, err := h.read()
		if err != nil {
			return err
		}
		if err := change(&st); err != nil {
			return err
		}
		return h.write(&st)
	})
}

func (h *Host) BootID() (string, error) {
	st, err := h.State()
	return st.BootID, err
}

func (h *Host) Uptime() (time.Duration, error) {
	st, err := h.State()
	if err != nil {
		return 0, err
	}
	return h.clock().Sub(st.BootTime), nil
}

// Reboot records the request; the harness carries it out with
// CompleteReboot, as the real machine would shortly after systemd accepted
// the reboot job. The method is recorded in its canonical form (systemctl
// is recorded as systemd).
func (h *Host) Reboot(_ context.Context, method host.RebootMethod) error {
	m, err := host.ParseRebootMethod(string(method))
	if err != nil {
		return err
	}
	return h.Update(func(st *State) error {
		if st.RebootFailure != "" {
			return fmt.Errorf("simulated host %s: reboot (%s) failed: %s", h.Dir, m, st.RebootFailure)
		}
		st.RebootRequest = m
		return nil
	})
}

func (h *Host) Path(hostPath string) string { return h.linux.Path(hostPath) }

// CompleteReboot carries out a requested reboot: a new boot ID and boot
// time, /run emptied, wedges gone unless sticky, and the installed driver
// package (if any) loaded by the boot, as a real host loads the modules
// the installer left. It reports whether a reboot was pending.
func (h *Host) CompleteReboot() (bool, error) {
	done := false
	err := h.Update(func(st *State) error {
		if st.RebootRequest == "" {
			return nil
		}
		done = true
		st.RebootRequest = ""
		st.Reboots++
		st.BootID = newBootID()
		st.BootTime = h.clock()
		st.LoadedDriver = st.InstalledDriver
		if !st.StickyWedge {
			st.Wedged = nil
		}
		if err := h.unload(); err != nil {
			return err
		}
		if err := os.RemoveAll(h.Path("/run")); err != nil {
			return err
		}
		if st.LoadedDriver == "" {
			return nil
		}
		if err := h.loadModules(); err != nil {
			return err
		}
		return h.createDevices(*st)
	})
	return done, err
}

// readOnly answers host.Linux's read-only check from State.ReadOnly.
func (h *Host) readOnly(hostPath string) (bool, error) {
	st, err := h.State()
	if err != nil {
		return false, err
	}
	for _, ro := range st.ReadOnly {
		if hostPath == ro || strings.HasPrefix(hostPath, strings.TrimSuffix(ro, "/")+"/") {
			return true, nil
		}
	}
	return false, nil
}

// stuckPoll is how often a stuck npu-smi looks whether the harness freed it.
const stuckPoll = 50 * time.Millisecond

func (h *Host) read() (State, error) {
	var st State
	b, err := os.ReadFile(h.statePath())
	if err != nil {
		return st, fmt.Errorf("read simulated host %s: %w", h.Dir, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("parse simulated host %s: %w", h.statePath(), err)
	}
	return st, nil
}

func (h *Host) write(st *State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode simulated host state: %w", err)
	}
	tmp, err := os.CreateTemp(h.Dir, ".state-*")
	if err != nil {
		return fmt.Errorf("write simulated host %s: %w", h.Dir, err)
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write simulated host %s: %w", h.Dir, err)
	}
	if err := os.Rename(tmp.Name(), h.statePath()); err != nil {
		return fmt.Errorf("write simulated host %s: %w", h.Dir, err)
	}
	return nil
}

func (h *Host) withLock(how int, fn func() error) error {
	f, err := os.OpenFile(filepath.Join(h.Dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("lock simulated host %s: %w", h.Dir, err)
	}
	// Closing the descriptor releases the lock.
	defer func() { _ = f.Close() }()
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		return fmt.Errorf("lock simulated host %s: %w", h.Dir, err)
	}
	return fn()
}

func newBootID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	s := hex.EncodeToString(b[:])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
