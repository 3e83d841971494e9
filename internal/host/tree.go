package host

// Tree mode (drivertree.ModeTree): on a host whose / is read-only
// (KubeOS), the driver pod copies an installed driver tree from its image
// into a writable host path and loads its modules from there at every
// boot, since nothing may be written to /lib/modules, /usr/local or /lib.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/openfuyao/npu-stack/internal/drivertree"
)

// InsmodPaths are where kmod links insmod: ${sbindir}/insmod, /usr/sbin
// by default (kmod meson.build: prefix /usr, `ln ... kmod $sbindir/<tool>`
// for each tool), and /sbin, the same directory on a merged-/usr root and
// the older place on an unmerged one (docs/host-contract.md section 7).
var InsmodPaths = []string{"/usr/sbin/insmod", "/sbin/insmod"}

// stagingSuffix names the copy of a tree being installed beside the
// driver tree (same filesystem, so the swap is a rename).
const stagingSuffix = ".npu-stack-new"

// InstalledTree is the Version= of the driver tree's version.info, ""
// when no tree is installed, and whether the tree holds what tree mode
// loads (drivertree.Required): one left by a .run install or cut short
// does not.
func (l *Linux) InstalledTree() (string, bool, error) {
	root := l.driverRoot()
	file := filepath.Join(root, VersionFile)
	b, err := os.ReadFile(l.Path(file))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", file, err)
	}
	v, err := ParseVersionInfo(b)
	if err != nil {
		return "", false, fmt.Errorf("%s: %w", file, err)
	}
	need, err := drivertree.Required(drivertree.ModeTree, "", root)
	if err != nil {
		return v, false, err
	}
	whole := !slices.ContainsFunc(need, func(p string) bool {
		_, err := os.Stat(l.Path(p))
		return err != nil
	})
	return v, whole, nil
}

// InstallTree installs the driver tree imageTree (a path in this
// process's file system: the driver image's) as the host's driver tree,
// whole or not at all: it is copied beside the tree, then swapped in with
// one rename, so neither a killed pod nor a crash leaves half a tree. The
// old tree's modules stay loaded until the reboot; none are loaded here.
// /etc/ascend_install.info then records the install path and
// Driver_Install_Status=complete, as the vendor installer does.
func (l *Linux) InstallTree(ctx context.Context, version, imageTree string) error {
	b, err := os.ReadFile(filepath.Join(imageTree, drivertree.VersionFile))
	if err != nil {
		return &ProblemError{What: fmt.Sprintf("the driver image has no driver tree at %s (%v)", imageTree, err),
			Fix: "build the image with the installed driver tree there (docs/installation.md, \"A driver image for tree mode\"), or set driver.imageTreePath to where it is"}
	}
	if got, err := ParseVersionInfo(b); err != nil || got != version {
		return &ProblemError{What: fmt.Sprintf("the driver image's tree %s is version %q (%s), not driver.version %s", imageTree, got, drivertree.VersionFile, version),
			Fix: "use the image built for driver.version, or set driver.version to the image's", Err: err}
	}
	root := l.driverRoot()
	if ro, err := l.ReadOnlyAncestor(filepath.Dir(root)); err != nil {
		return fmt.Errorf("driver tree %s: %w", root, err)
	} else if ro != "" {
		return &ProblemError{What: fmt.Sprintf("the driver tree %s is on a read-only filesystem (%s)", root, ro),
			Fix: "set the profile's hostDriverPath under a writable path: /var/lib/Ascend/driver on KubeOS, whose /var is writable"}
	}
	staging := l.Path(root + stagingSuffix)
	if err := os.RemoveAll(staging); err != nil {
		return fmt.Errorf("remove the leftover copy %s: %w", root+stagingSuffix, err)
	}
	if err := os.MkdirAll(filepath.Dir(staging), 0o755); err != nil {
		return fmt.Errorf("driver tree %s: %w", root, err)
	}
	if err := copyTree(ctx, imageTree, staging); err != nil {
		_ = os.RemoveAll(staging)
		return fmt.Errorf("copy the driver tree %s from the image to %s: %w", imageTree, root+stagingSuffix, err)
	}
	unix.Sync()
	if err := swapIn(staging, l.Path(root)); err != nil {
		return fmt.Errorf("swap the new driver tree into %s: %w", root, err)
	}
	if err := os.RemoveAll(staging); err != nil {
		return fmt.Errorf("remove the replaced driver tree %s: %w", root+stagingSuffix, err)
	}
	return l.recordTreeInstall(filepath.Dir(root))
}

// swapIn puts staging in place of dst: one atomic exchange when dst
// exists (renameat2 RENAME_EXCHANGE), leaving the old tree at staging; a
// rename when it does not.
func swapIn(staging, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	err := unix.Renameat2(unix.AT_FDCWD, staging, unix.AT_FDCWD, dst, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOENT) {
		return os.Rename(staging, dst)
	}
	return err
}

// copyTree copies the directory src to dst: modes, owners (the tree's
// lib64 files belong to HwHiAiUser, driver.xml install_own) and symlinks
// as they are.
func copyTree(ctx context.Context, src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		switch {
		case fi.IsDir():
			err = os.Mkdir(to, fi.Mode().Perm())
		case fi.Mode()&fs.ModeSymlink != 0:
			var target string
			if target, err = os.Readlink(p); err == nil {
				err = os.Symlink(target, to)
			}
		case fi.Mode().IsRegular():
			err = copyRegular(p, to, fi.Mode().Perm())
		default:
			return fmt.Errorf("%s: not a file, directory or symlink", p)
		}
		if err != nil {
			return err
		}
		if st != nil {
			if err := os.Lchown(to, int(st.Uid), int(st.Gid)); err != nil {
				return err
			}
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return os.Chmod(to, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
		}
		return nil
	})
}

func copyRegular(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// recordTreeInstall updates /etc/ascend_install.info as the installer's
// updateInstallParam does (each key rewritten, the others kept; hicann/
// driver v8.5.0 common.sh), Driver_Install_Status=complete last
// (install.sh statusUpdate), through a rename, so no reader sees half a
// file. Tools and workloads read the install path there.
func (l *Linux) recordTreeInstall(installPath string) error {
	set := [][2]string{{"Driver_Install_Type", "full"}, {"Driver_Install_Path_Param", installPath}, {"Driver_Install_Mode", "normal"}, {"Driver_Install_Status", "complete"}}
	file := l.Path(InstallInfoFile)
	old, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", InstallInfoFile, err)
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimRight(string(old), "\n"), "\n") {
		key, _, _ := strings.Cut(line, "=")
		if line == "" || key == set[0][0] || key == set[1][0] || key == set[2][0] || key == set[3][0] {
			continue
		}
		lines = append(lines, line)
	}
	for _, kv := range set {
		lines = append(lines, kv[0]+"="+kv[1])
	}
	tmp := file + stagingSuffix
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", InstallInfoFile, err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("write %s: %w", InstallInfoFile, err)
	}
	return nil
}
