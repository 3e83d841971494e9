package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// StateDir is npu-stack's own persistent directory on the host; nothing
// else writes under it, so an uninstall removes it whole.
const StateDir = "/var/lib/npu-stack"

// StagingDir is where the driver pod copies the vendor installer on the
// host before running it there: /var stays writable on KubeOS (its /var
// is a bind mount of /persist/var, openeuler-mirror/KubeOS v1.0.8
// files/var.mount).
const StagingDir = StateDir + "/installer"

// ReadOnlyAncestor is the nearest existing ancestor of hostPath (the path
// itself if it exists) when it is on a read-only filesystem, "" when
// writable.
func (l *Linux) ReadOnlyAncestor(hostPath string) (string, error) {
	p := filepath.Clean(hostPath)
	for {
		_, err := os.Stat(l.Path(p))
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) || p == "/" {
			return "", fmt.Errorf("check %s: %w", p, err)
		}
		p = filepath.Dir(p)
	}
	ro, err := l.readOnly(p)
	if err != nil || !ro {
		return "", err
	}
	return p, nil
}

func (l *Linux) readOnly(hostPath string) (bool, error) {
	if l.ReadOnly != nil {
		return l.ReadOnly(hostPath)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(l.Path(hostPath), &st); err != nil {
		return false, fmt.Errorf("statfs %s: %w", hostPath, err)
	}
	const stRdonly = 0x1 // ST_RDONLY, statfs(2) f_flags
	return st.Flags&stRdonly != 0, nil
}

// CheckDriverTree refuses, before anything runs, a driver tree the
// installer cannot write: KubeOS's /usr is read-only (openeuler-mirror/
// KubeOS v1.0.8 docs/design/architecture_en.md, "The root file system of
// KubeOS is read-only"), so /usr/local/Ascend/driver fails half-way.
func (l *Linux) CheckDriverTree() error {
	root := l.driverRoot()
	ro, err := l.ReadOnlyAncestor(root)
	if err != nil {
		return fmt.Errorf("driver tree %s: %w", root, err)
	}
	if ro == "" {
		return nil
	}
	return &ProblemError{
		What: fmt.Sprintf("the driver tree %s is on a read-only filesystem (%s is read-only, as /usr is on KubeOS)", root, ro),
		Fix:  "set the node's profile driver.profiles[].hostDriverPath to a writable path, /var/lib/Ascend/driver on KubeOS, with a driver image that installs there",
	}
}

// RunWrites are the host paths outside the driver tree the vendor .run
// writes (hicann/driver v8.5.0 driver_atlas.xml: npu-smi in /usr/local/
// bin and /usr/local/sbin, /usr/local/dcmi; deal_ko.sh: /lib/modules/
// $(uname -r)/updates; run_driver_install.sh: /lib/davinci.conf).
var RunWrites = []string{"/usr/local/bin", "/usr/local/sbin", "/usr/local/dcmi", "/lib/modules", "/lib/davinci.conf"}

// CheckRunTargets refuses, before the .run starts, a host where it would
// fail half-way: one of RunWrites on a read-only filesystem (KubeOS).
func (l *Linux) CheckRunTargets() error {
	for _, p := range RunWrites {
		ro, err := l.ReadOnlyAncestor(p)
		if err != nil {
			return fmt.Errorf("check %s: %w", p, err)
		}
		if ro != "" {
			return &ProblemError{
				What: fmt.Sprintf("the vendor .run writes %s, and %s is on a read-only filesystem here (as / is on KubeOS)", strings.Join(RunWrites, ", "), ro),
				Fix:  "set the profile's installMode: tree, with a driver image that carries an installed driver tree, and hostDriverPath under a writable path such as /var/lib/Ascend/driver (docs/installation.md, \"KubeOS and other read-only roots\")",
			}
		}
	}
	return nil
}

// InstallDriver installs version on the host as the vendor's
// containerised installer does: the host's root at /host, the installer
// run chrooted into it (`chroot /HOST_ROOT_TO_CONTAINER/ <run> --full
// --quiet`, hicann/driver v8.5.0,
// scripts/package/driver/common/scripts/install_npudrv.sh
// child_driver_install). Chrooted, every path the installer writes is the
// host's: /lib/modules/$(uname -r)/updates and depmod (deal_ko.sh),
// /etc/ascend_install.info edited in place (common.sh updateInstallParam),
// /etc/ld.so.conf.d/ascend_driver_so.conf and ldconfig
// (host_servers_setup.sh), npu-smi in /usr/local/{bin,sbin}; run inside
// the container with only some host paths mounted, these writes fail or
// go to the container. argv[0] is a file in the driver image (the
// self-extracting .run); it is copied to StagingDir on the host first,
// since a chrooted process sees only the host. The installer's
// --install-path is set to the driver root's parent unless argv sets it
// (args_parse.sh l.462). Exit 2, installed but hot reset failed, is
// success here: the rollout's reboot loads the new modules (install.sh
// main()).
func (l *Linux) InstallDriver(ctx context.Context, version string, argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("install driver %s: no install command given", version)
	}
	if err := l.CheckDriverTree(); err != nil {
		return err
	}
	if err := l.CheckRunTargets(); err != nil {
		return err
	}
	staged := filepath.Join(StagingDir, version, filepath.Base(argv[0]))
	if err := copyFile(argv[0], l.Path(staged)); err != nil {
		return fmt.Errorf("install driver %s: copy the installer %s from the driver image to the host's %s: %w", version, argv[0], staged, err)
	}
	defer func() { _ = os.Remove(l.Path(staged)) }()
	args := append([]string{}, argv[1:]...)
	if !hasOption(args, "--install-path") {
		args = append(args, "--install-path="+filepath.Dir(l.driverRoot()))
	}
	run := l.Run
	if run == nil {
		run = ExecRunner
	}
	e := Exec{Root: l.Root, Path: staged, Args: args, Env: []string{"PATH=" + hostPATH, "NPU_DRIVER_VERSION=" + version}, Output: os.Stdout}
	_, err := run(ctx, e)
	if ee, ok := IsExitError(err); ok && ee.Code == 2 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("install driver %s (%s, chrooted into the host root %s): %w", version, command(e), l.Root, err)
	}
	return nil
}

func hasOption(args []string, name string) bool {
	for _, a := range args {
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// copyFile copies src to dst (mode 0700, root's), replacing it whole.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o700); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
