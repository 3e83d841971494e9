//go:build linux

// Package noderoot builds a real node's root file system inside the node's
// own mount namespace and makes it the node's "/": the plan is written by
// package realnode, which knows the host's directories, and applied by
// the node's init (realnode/nodeinit), which runs in the new namespaces.
package noderoot

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Mount is one mount in the node's root.
type Mount struct {
	// Source is a host path for a bind mount, else the file system's
	// source name ("tmpfs", "overlay", "proc", "devpts").
	Source string `json:"source"`
	// Target is the path inside the node's root.
	Target string `json:"target"`
	// Type is the file system type; empty means a bind mount.
	Type string `json:"type,omitempty"`
	// Data are the file system's options (overlay's lowerdir=...).
	Data string `json:"data,omitempty"`
	// ReadOnly mounts it read-only (a bind mount is remounted so).
	ReadOnly bool `json:"readOnly,omitempty"`
	// Recursive binds the submounts too (/sys with its cgroup mounts).
	Recursive bool `json:"recursive,omitempty"`
}

// Symlink is a symbolic link in the node's root.
type Symlink struct {
	Path   string `json:"path"`
	Target string `json:"target"`
}

// Plan is a node's root: a tmpfs at Root on the host holding Mounts and
// Symlinks, in order, which becomes "/" by pivot_root.
type Plan struct {
	Root     string    `json:"root"`
	Hostname string    `json:"hostname"`
	Mounts   []Mount   `json:"mounts"`
	Symlinks []Symlink `json:"symlinks"`
	// ReadOnlyRoot makes the root itself read-only once everything is
	// mounted on it, as KubeOS mounts / (openeuler-mirror/KubeOS
	// files/*.mount): only the mounts that are writable stay so.
	ReadOnlyRoot bool `json:"readOnlyRoot,omitempty"`
	// BootIDFile, a path in the node's root, is bound read-only over
	// /proc/sys/kernel/random/boot_id once the node's /proc is mounted:
	// the kernel has one boot ID per machine, and each node needs its own
	// that changes when the node reboots.
	BootIDFile string `json:"bootIDFile,omitempty"`
	// ProcGuards are files of the node's root bound over files of /proc
	// (Target) once /proc is mounted, where the target exists: the SysRq
	// files, so that the node cannot reboot the machine.
	ProcGuards []Bind `json:"procGuards,omitempty"`
}

// Bind binds the file Source (a path in the node's root) over Target.
type Bind struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// Write stores the plan as JSON at path.
func (p Plan) Write(path string) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("node root plan: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("node root plan: %w", err)
	}
	return nil
}

// Read loads a plan written by Write.
func Read(path string) (Plan, error) {
	var p Plan
	b, err := os.ReadFile(path)
	if err != nil {
		return p, fmt.Errorf("node root plan: %w", err)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("node root plan %s: %w", path, err)
	}
	return p, nil
}

// Apply builds the root and pivots into it. It must run in a fresh mount
// namespace (and, for /proc, as the first process of a fresh PID
// namespace): it first makes every inherited mount private, so nothing
// mounted here ever reaches the host, then makes the new root shared
// within the node, so the kubelet's and containerd's mount propagation
// (HostToContainer, Bidirectional) works as on a machine.
func (p Plan) Apply() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("make the inherited mounts private: %w: / is no mount point (a chroot into a plain directory?): bind-mount the root onto itself before entering it (mount --bind ROOT ROOT)", err)
		}
		return fmt.Errorf("make the inherited mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", p.Root, "tmpfs", 0, "mode=755"); err != nil {
		return fmt.Errorf("tmpfs for the node root at %s: %w", p.Root, err)
	}
	for _, m := range p.Mounts {
		if err := p.mount(m); err != nil {
			return err
		}
	}
	for _, l := range p.Symlinks {
		target := filepath.Join(p.Root, l.Path)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return fmt.Errorf("symlink %s: %w", l.Path, err)
		}
		// A node started again on its directory (its /var persists, as a
		// disk does) finds its links in place.
		if cur, err := os.Readlink(target); err == nil && cur == l.Target {
			continue
		}
		if err := os.Symlink(l.Target, target); err != nil {
			return fmt.Errorf("symlink %s -> %s: %w", l.Path, l.Target, err)
		}
	}
	return p.pivot()
}

func (p Plan) mount(m Mount) error {
	target := filepath.Join(p.Root, m.Target)
	if err := mountpoint(m, target); err != nil {
		return err
	}
	if m.Type != "" {
		var flags uintptr
		if m.ReadOnly {
			flags = unix.MS_RDONLY
		}
		if err := unix.Mount(m.Source, target, m.Type, flags, m.Data); err != nil {
			return fmt.Errorf("mount %s (%s) at %s: %w", m.Source, m.Type, m.Target, err)
		}
		return nil
	}
	flags := uintptr(unix.MS_BIND)
	if m.Recursive {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(m.Source, target, "", flags, ""); err != nil {
		return fmt.Errorf("bind %s at %s: %w", m.Source, m.Target, err)
	}
	if m.ReadOnly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("make %s read-only: %w", m.Target, err)
		}
	}
	return nil
}

// mountpoint creates what m is mounted on: a file for a bind of a file
// (a device node), else a directory.
func mountpoint(m Mount, target string) error {
	if m.Type == "" {
		st, err := os.Stat(m.Source)
		if err != nil {
			return fmt.Errorf("bind source for %s: %w", m.Target, err)
		}
		if !st.IsDir() {
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return fmt.Errorf("mount point %s: %w", m.Target, err)
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o644)
			if err != nil {
				return fmt.Errorf("mount point %s: %w", m.Target, err)
			}
			return f.Close()
		}
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("mount point %s: %w", m.Target, err)
	}
	return nil
}

func (p Plan) pivot() error {
	old := filepath.Join(p.Root, ".oldroot")
	if err := os.Mkdir(old, 0o700); err != nil {
		return fmt.Errorf("pivot: %w", err)
	}
	if err := unix.PivotRoot(p.Root, old); err != nil {
		return fmt.Errorf("pivot_root to %s: %w", p.Root, err)
	}
	if err := os.Chdir("/"); err != nil {
		return fmt.Errorf("pivot: %w", err)
	}
	if err := unix.Unmount("/.oldroot", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := os.Remove("/.oldroot"); err != nil {
		return fmt.Errorf("pivot: %w", err)
	}
	// A proc of this PID namespace: the node's processes see only the node.
	if err := os.MkdirAll("/proc", 0o555); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if p.BootIDFile != "" {
		if err := bindReadOnly(p.BootIDFile, BootIDPath); err != nil {
			return fmt.Errorf("the node's boot ID: %w", err)
		}
	}
	for _, g := range p.ProcGuards {
		if _, err := os.Stat(g.Target); err != nil {
			continue // this kernel has no such file
		}
		if err := unix.Mount(g.Source, g.Target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("guard %s with %s: %w", g.Target, g.Source, err)
		}
	}
	if p.ReadOnlyRoot {
		if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("make the node root read-only: %w", err)
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make the node root shared: %w", err)
	}
	if p.Hostname != "" {
		if err := unix.Sethostname([]byte(p.Hostname)); err != nil {
			return fmt.Errorf("hostname %s: %w", p.Hostname, err)
		}
	}
	return nil
}

// BootIDPath is where Linux shows the boot ID (proc(5)).
const BootIDPath = "/proc/sys/kernel/random/boot_id"

// bindReadOnly binds the file src over the file dst, read-only.
func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s over %s: %w", src, dst, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", dst, err)
	}
	return nil
}
