package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// cgroupParent holds every real node's cgroup root, one per node, in each
// cgroup hierarchy of the machine.
const cgroupParent = "/npu-stack-realnode"

// cgroupRoot is the kubelet's cgroupRoot for this node: its pods' cgroups
// (kubepods/...) and their containers' live below it, apart from other
// nodes' and the host's. It starts with the PID of the test process that
// owns the node: node names repeat across test binaries, which may run at
// once, and a later run removes the cgroups of a test process that died
// without its teardown (sweepCgroups).
func (n *Node) cgroupRoot() string { return cgroupRootOf(os.Getpid(), n.cfg.Name) }

func cgroupRootOf(pid int, node string) string {
	return fmt.Sprintf("%s/%d-%s", cgroupParent, pid, node)
}

// cgroupMounts lists the mount points of the machine's cgroup hierarchies
// (v1 controllers, the named systemd one, the unified v2 one of a hybrid
// setup) from /proc/self/mountinfo.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroup hierarchies: %w", err)
	}
	defer func() { _ = f.Close() }()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if t := fields[sep+1]; t == "cgroup" || t == "cgroup2" {
			out = append(out, fields[4])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cgroup hierarchies: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("cgroup hierarchies: none mounted")
	}
	return out, nil
}

// createCgroupRoot makes the node's cgroup root in every hierarchy: the
// kubelet refuses a cgroupRoot that does not exist. A v1 cpuset cgroup
// starts with no CPUs and memory nodes; it gets its parent's.
func (n *Node) createCgroupRoot() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		parent := m
		for _, dir := range []string{filepath.Join(m, cgroupParent), filepath.Join(m, n.cgroupRoot())} {
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("node %s: cgroup %s: %w", n.cfg.Name, dir, err)
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(parent, f))
				if err != nil {
					continue // not the cpuset hierarchy
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("node %s: cgroup %s/%s: %w", n.cfg.Name, dir, f, err)
				}
			}
			parent = dir
		}
	}
	return nil
}

// removeCgroups removes the node's cgroup root and everything below it in
// every hierarchy once the node's processes are gone.
func (n *Node) removeCgroups() error { return removeCgroupTree(n.cgroupRoot()) }

// sweepCgroups removes the node cgroups left by test processes that no
// longer exist (killed before their teardown; their nodes died with them).
func sweepCgroups() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		entries, err := os.ReadDir(filepath.Join(m, cgroupParent))
		if err != nil {
			continue
		}
		for _, e := range entries {
			pid, _, ok := strings.Cut(e.Name(), "-")
			if !e.IsDir() || !ok {
				continue
			}
			if _, err := os.Stat("/proc/" + pid); err == nil {
				continue // its test process runs
			}
			errs = append(errs, removeCgroupTree(filepath.Join(cgroupParent, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// removeCgroupTree removes the cgroup rel (relative to each hierarchy's
// root) and everything below it in every hierarchy, deepest first; a
// cgroup whose last task has just exited may stay busy for a moment, so a
// removal is retried for a few seconds. The shared parent goes when it is
// empty.
func removeCgroupTree(rel string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var errs []error
	for _, m := range mounts {
		root := filepath.Join(m, rel)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range slices.Backward(dirs) {
			var last error
			err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
				last = os.Remove(d)
				return last == nil || errors.Is(last, fs.ErrNotExist), nil
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, last))
			}
		}
		_ = os.Remove(filepath.Join(m, cgroupParent)) // other nodes may still use it
	}
	return errors.Join(errs...)
}

// cgroupLeftovers lists the cgroup directories of this test process's
// node that exist in any hierarchy: none after Stop.
func cgroupLeftovers(node string) ([]string, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	var left []string
	for _, m := range mounts {
		d := filepath.Join(m, cgroupRootOf(os.Getpid(), node))
		if _, err := os.Stat(d); err == nil {
			left = append(left, d)
		}
	}
	return left, nil
}
