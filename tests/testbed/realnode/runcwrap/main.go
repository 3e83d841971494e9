//go:build linux

// Command runcwrap is the runc that containerd runs on a real test-bed
// node (package realnode). It gives every container the node's boot ID and
// otherwise is runc: on `runc create` it adds an OCI createContainer hook
// (itself, with the argument nodepaths.BootIDHook) to the bundle's
// config.json, then execs the real runc with the same arguments.
//
// Why: runc mounts a fresh procfs in every container, so a container reads
// the machine kernel's boot ID, which never changes when a test-bed node
// "reboots". On a real machine every container sees the kernel's one boot
// ID (Linux Documentation/admin-guide/sysctl/kernel.rst, "random"), which a
// reboot changes; the hook restores that by binding the node's boot ID
// file over /proc/sys/kernel/random/boot_id. runc itself refuses mounts
// under /proc other than a few lxcfs files (runc v1.3.3,
// libcontainer/rootfs_linux.go checkProcMount), so a config.json mount
// cannot do it; a createContainer hook runs in the container's mount
// namespace after its mounts and before pivot_root (same file,
// prepareRootfs), where it can.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/openfuyao/npu-stack/tests/testbed/realnode/nodepaths"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == nodepaths.BootIDHook {
		if err := bootIDHook(); err != nil {
			fmt.Fprintf(os.Stderr, "runcwrap %s: %v\n", nodepaths.BootIDHook, err)
			os.Exit(1)
		}
		return
	}
	if bundle, ok := createBundle(os.Args[1:]); ok {
		if err := addHook(filepath.Join(bundle, "config.json")); err != nil {
			fmt.Fprintf(os.Stderr, "runcwrap: %v\n", err)
			os.Exit(1)
		}
	}
	argv := append([]string{"runc"}, os.Args[1:]...)
	err := syscall.Exec(nodepaths.Runc, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "runcwrap: exec %s: %v\n", nodepaths.Runc, err)
	os.Exit(1)
}

// runc's global options that take a value (runc v1.3.3 main.go).
var globalWithValue = map[string]bool{"--root": true, "--log": true, "--log-format": true, "--criu": true, "--rootless": true}

// createBundle finds the bundle directory of a `runc [global options]
// create|run [options] <id>` command line; ok is false for any other
// command.
func createBundle(args []string) (bundle string, ok bool) {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			break
		}
		if globalWithValue[a] {
			i++
		}
	}
	if i >= len(args) || (args[i] != "create" && args[i] != "run") {
		return "", false
	}
	for j := i + 1; j < len(args); j++ {
		switch a := args[j]; {
		case a == "--bundle" || a == "-b":
			if j+1 < len(args) {
				return args[j+1], true
			}
		case strings.HasPrefix(a, "--bundle="):
			return strings.TrimPrefix(a, "--bundle="), true
		case strings.HasPrefix(a, "-b="):
			return strings.TrimPrefix(a, "-b="), true
		}
	}
	wd, err := os.Getwd() // runc's default bundle is the working directory
	return wd, err == nil
}

// addHook appends the boot-ID hook to the createContainer hooks of the
// OCI config at path, keeping every other field as it is (numbers too).
func addHook(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("bundle config: %w", err)
	}
	var spec map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("bundle config %s: %w", path, err)
	}
	hooks, _ := spec["hooks"].(map[string]any)
	if hooks == nil {
		hooks = map[string]any{}
	}
	list, _ := hooks["createContainer"].([]any)
	hooks["createContainer"] = append(list, map[string]any{
		"path": nodepaths.RuncWrapper,
		"args": []any{"runcwrap", nodepaths.BootIDHook},
	})
	spec["hooks"] = hooks
	out, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("bundle config %s: %w", path, err)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		return fmt.Errorf("bundle config: %w", err)
	}
	return nil
}

// bootIDHook binds the node's boot ID file over the container's
// /proc/sys/kernel/random/boot_id, read-only. It runs as runc's
// createContainer hook: in the container's mount namespace, before
// pivot_root, so the node's paths still resolve; the container's state
// (its bundle) comes on standard input.
func bootIDHook() error {
	var state struct {
		Bundle string `json:"bundle"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&state); err != nil {
		return fmt.Errorf("container state on stdin: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(state.Bundle, "config.json"))
	if err != nil {
		return err
	}
	var spec struct {
		Root struct {
			Path string `json:"path"`
		} `json:"root"`
		Linux struct {
			ReadonlyPaths []string `json:"readonlyPaths"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("bundle config: %w", err)
	}
	if spec.Root.Path == "" {
		return errors.New("bundle config has no root.path")
	}
	rootfs := spec.Root.Path
	if !filepath.IsAbs(rootfs) {
		rootfs = filepath.Join(state.Bundle, rootfs)
	}
	dst := filepath.Join(rootfs, "proc/sys/kernel/random/boot_id")
	if err := unix.Mount(nodepaths.BootIDFile, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s over %s: %w", nodepaths.BootIDFile, dst, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", dst, err)
	}
	// A privileged container (CRI gives it no read-only paths) may write
	// the kernel's SysRq files: where the machine has them, it writes the
	// node's guards instead. Other containers get them read-only from
	// runc, which cannot reboot anything.
	if slices.Contains(spec.Linux.ReadonlyPaths, "/proc/sysrq-trigger") {
		return nil
	}
	for _, g := range nodepaths.SysrqGuards() {
		dst := filepath.Join(rootfs, g[0])
		if _, err := os.Stat(dst); err != nil {
			continue
		}
		if err := unix.Mount(g[1], dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s over %s: %w", g[1], dst, err)
		}
	}
	return nil
}
