package realnode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/openfuyao/npu-stack/tests/testbed/realnode/nodepaths"
	"github.com/openfuyao/npu-stack/tests/testbed/realnode/noderoot"
)

// Host-side layout of a node's directory (Config.Dir).
const (
	dirRoot  = "rootfs" // mount point of the node's "/" (in its namespace)
	dirUpper = "upper"  // upper layers of the /etc and /usr overlays
	dirWork  = "work"   // overlay work directories
	dirVar   = "var"    // the node's /var: kubelet, containerd, logs
)

// rootPlan is the node's root file system: the host's /usr and /etc as
// overlays whose writes stay in the node (a driver installer writes
// /usr/local and /etc), its own /var, /run, /tmp, /root and /dev, the
// host's /sys (the kubelet and runc need its cgroup hierarchies), and the
// node's binaries read-only under /opt. Nothing else of the host (no /work,
// no /home, no host /run) is visible in the node. Its host root follows
// docs/host-contract.md: /sys/module is a tmpfs of its own (the driver's
// modules appear there when "loaded", hostroot.go), /dev holds the
// driver's device nodes while it is loaded, and the node's boot ID file
// is bound over /proc/sys/kernel/random/boot_id.
func (n *Node) rootPlan() (noderoot.Plan, error) {
	d := n.cfg.Dir
	for _, sub := range []string{dirRoot, dirVar, filepath.Join(dirUpper, "etc"), filepath.Join(dirUpper, "usr"),
		filepath.Join(dirWork, "etc"), filepath.Join(dirWork, "usr"), filepath.Join(dirVar, "log")} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
			return noderoot.Plan{}, fmt.Errorf("node %s: %w", n.cfg.Name, err)
		}
	}
	overlay := func(dir string) noderoot.Mount {
		return noderoot.Mount{Source: "overlay", Target: "/" + dir, Type: "overlay", Data: fmt.Sprintf(
			"lowerdir=/%s,upperdir=%s,workdir=%s", dir, filepath.Join(d, dirUpper, dir), filepath.Join(d, dirWork, dir))}
	}
	usr := overlay("usr")
	if n.cfg.ReadOnlyRoot {
		// The stand-in insmod is part of the read-only image, as kmod's
		// is part of KubeOS's.
		if err := installInsmod(n.cfg.Insmod, filepath.Join(d, dirUpper, "usr", "sbin", "insmod")); err != nil {
			return noderoot.Plan{}, fmt.Errorf("node %s: %w", n.cfg.Name, err)
		}
		usr.ReadOnly = true
	}
	tmpfs := func(target, mode string) noderoot.Mount {
		return noderoot.Mount{Source: "tmpfs", Target: target, Type: "tmpfs", Data: "mode=" + mode}
	}
	p := noderoot.Plan{
		Root:         filepath.Join(d, dirRoot),
		Hostname:     n.cfg.Name,
		BootIDFile:   nodepaths.BootIDFile,
		ReadOnlyRoot: n.cfg.ReadOnlyRoot,
		Mounts: []noderoot.Mount{
			usr,
			overlay("etc"),
			{Source: filepath.Join(d, dirVar), Target: "/var"},
			tmpfs("/run", "755"),
			tmpfs("/tmp", "1777"),
			tmpfs("/root", "700"),
			tmpfs("/opt", "755"),
			{Source: n.cfg.BinDir, Target: BinDir, ReadOnly: true},
			{Source: n.cfg.CNIDir, Target: cniBinDir, ReadOnly: true},
			{Source: "/sys", Target: "/sys", Recursive: true},
			// The machine's modules are not the node's: the node's
			// kernel modules are what its boot loaded (loadDriver).
			tmpfs("/sys/module", "755"),
			{Source: n.cfg.RuncWrapper, Target: nodepaths.RuncWrapper, ReadOnly: true},
			tmpfs("/dev", "755"),
			{Source: "devpts", Target: "/dev/pts", Type: "devpts", Data: "newinstance,ptmxmode=0666,mode=0620"},
			tmpfs("/dev/shm", "1777"),
		},
		Symlinks: []noderoot.Symlink{
			{Path: "/dev/ptmx", Target: "pts/ptmx"},
			{Path: "/dev/fd", Target: "/proc/self/fd"},
			{Path: "/dev/stdin", Target: "/proc/self/fd/0"},
			{Path: "/dev/stdout", Target: "/proc/self/fd/1"},
			{Path: "/dev/stderr", Target: "/proc/self/fd/2"},
			{Path: "/var/run", Target: "../run"},
		},
	}
	// The machine's SysRq files, if its kernel has them, are covered in
	// the node by files of its control directory (nodepaths.SysrqGuards).
	for _, g := range nodepaths.SysrqGuards() {
		if _, err := os.Stat(g[0]); err != nil {
			continue
		}
		guard := filepath.Join(d, dirVar, strings.TrimPrefix(g[1], "/var/"))
		if _, err := os.Stat(guard); errors.Is(err, fs.ErrNotExist) {
			if err := os.WriteFile(guard, nil, 0o644); err != nil {
				return p, fmt.Errorf("node %s: %w", n.cfg.Name, err)
			}
		}
		p.ProcGuards = append(p.ProcGuards, noderoot.Bind{Source: g[1], Target: g[0]})
	}
	// The character devices every machine has; /dev/kmsg for the
	// kubelet's OOM watcher.
	for _, dev := range []string{"null", "zero", "full", "random", "urandom", "tty", "kmsg"} {
		p.Mounts = append(p.Mounts, noderoot.Mount{Source: "/dev/" + dev, Target: "/dev/" + dev})
	}
	// bin, sbin, lib, lib64: symlinks into /usr on a merged-/usr host
	// (Debian 12, Ubuntu, openEuler), read-only binds otherwise.
	for _, top := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		host := "/" + top
		st, err := os.Lstat(host)
		switch {
		case err != nil:
			continue
		case st.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(host)
			if err != nil {
				return p, fmt.Errorf("node %s: %w", n.cfg.Name, err)
			}
			p.Symlinks = append(p.Symlinks, noderoot.Symlink{Path: host, Target: target})
		case st.IsDir():
			p.Mounts = append(p.Mounts, noderoot.Mount{Source: host, Target: host, ReadOnly: true})
		}
	}
	return p, nil
}

// installInsmod copies the stand-in insmod into the node's /usr.
func installInsmod(src, dst string) error {
	if src == "" {
		return errors.New("a read-only root needs the stand-in insmod (Config.Insmod)")
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}
