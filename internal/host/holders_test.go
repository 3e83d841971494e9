package host

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A process holding a davinci node open is found in the real /proc by the
// node's path, with its PID and command; one holding another file is not.
func TestDeviceHoldersFindsTheHolderByPath(t *testing.T) {
	dir := t.TempDir()
	devs := filepath.Join(dir, "host", "dev")
	if err := os.MkdirAll(devs, 0o755); err != nil {
		t.Fatal(err)
	}
	hold := func(name string) *exec.Cmd {
		f, err := os.Create(filepath.Join(devs, name))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }() // the child has its own copy
		cmd := exec.Command("sleep", "300")
		cmd.ExtraFiles = []*os.File{f} // held by the child from its start
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	holder := hold("davinci0")
	other := hold("davinci0.bak")
	all, err := DeviceHolders(func(p string) string { return p }) // this machine's /proc
	if err != nil {
		t.Fatal(err)
	}
	var found *Holder
	for i := range all {
		switch all[i].PID {
		case holder.Process.Pid:
			found = &all[i]
		case other.Process.Pid:
			t.Errorf("PID %d holds %s/davinci0.bak, not a device node, and was listed: %+v", other.Process.Pid, devs, all[i])
		}
	}
	if found == nil {
		t.Fatalf("holder PID %d not found in %+v", holder.Process.Pid, all)
	}
	if got := found.String(); got != "PID "+strconv.Itoa(holder.Process.Pid)+" (sleep 300) holds /dev/davinci0" {
		t.Errorf("holder named %q", got)
	}
}

// A holder in a container is named by its pod and container, read from the
// kubelet's log link, and a host without /proc has no holders.
func TestDeviceHoldersNamesThePod(t *testing.T) {
	root := t.TempDir()
	id := strings.Repeat("ab", 32)
	mk := func(p, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("/proc/4242/cmdline", "/usr/local/bin/device-plugin\x00-logFile=x\x00")
	mk("/proc/4242/cgroup", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234.slice/cri-containerd-"+id+".scope\n")
	if err := os.MkdirAll(filepath.Join(root, "/proc/4242/fd"), 0o755); err != nil {
		t.Fatal(err)
	}
	for fd, target := range map[string]string{"3": "/dev/davinci_manager", "4": "/host/dev/davinci1", "5": "/var/log/x.log", "6": "/dev/davinci_manager"} {
		if err := os.Symlink(target, filepath.Join(root, "/proc/4242/fd", fd)); err != nil {
			t.Fatal(err)
		}
	}
	mk(ContainerLogsDir+"/ascend-device-plugin-x7k2p_npu-operator_device-plugin-"+id+".log", "")
	at := func(p string) string { return filepath.Join(root, p) }
	got, err := DeviceHolders(at)
	if err != nil || len(got) != 1 {
		t.Fatalf("holders %+v, %v", got, err)
	}
	want := "pod npu-operator/ascend-device-plugin-x7k2p container device-plugin (PID 4242, /usr/local/bin/device-plugin -logFile=x) holds /dev/davinci1, /dev/davinci_manager"
	if s := got[0].String(); s != want {
		t.Errorf("holder %q\nwant %q", s, want)
	}
	if got, err := DeviceHolders(func(p string) string { return filepath.Join(t.TempDir(), p) }); err != nil || got != nil {
		t.Errorf("no /proc: %+v, %v", got, err)
	}
}

func TestReadInstallState(t *testing.T) {
	const tree = "/usr/local/Ascend/driver"
	for _, tc := range []struct {
		name  string
		files map[string]string
		half  string // "" = not half-installed, else a word of Why
	}{
		{"nothing installed", nil, ""},
		{"complete", map[string]string{tree + "/version.info": "Version=25.5.0\n", tree + "/lib64/driver/libdcmi.so": "",
			InstallInfoFile: "Driver_Install_Path_Param=/usr/local/Ascend\nDriver_Install_Status=complete\n"}, ""},
		{"uninstalled half-way: version.info gone", map[string]string{tree + "/lib64/driver/libdcmi.so": "",
			InstallInfoFile: "Driver_Install_Path_Param=/usr/local/Ascend\nDriver_Install_Status=complete\n"}, "no version.info"},
		{"install record without status", map[string]string{tree + "/version.info": "Version=25.5.0\n",
			InstallInfoFile: "UserName=HwHiAiUser\nDriver_Install_Path_Param=/usr/local/Ascend\n"}, "without Driver_Install_Status=complete"},
		{"firmware only in the record", map[string]string{InstallInfoFile: "Firmware_Install_Path_Param=/usr/local/Ascend\n"}, ""},
		{"empty tree", map[string]string{tree + "/.keep": ""}, "no version.info"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			at := func(p string) string { return filepath.Join(root, p) }
			for p, c := range tc.files {
				if err := os.MkdirAll(filepath.Dir(at(p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(at(p), []byte(c), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			st, err := ReadInstallState(at, tree)
			if err != nil {
				t.Fatal(err)
			}
			if tc.half == "" && st.Half || tc.half != "" && (!st.Half || !strings.Contains(st.Why, tc.half)) {
				t.Errorf("state %+v, want half-installed=%v (%q)", st, tc.half != "", tc.half)
			}
		})
	}
}

// A program stopped by its context takes its whole process group with it:
// an installer's children do not run on over the driver tree.
func TestExecRunnerStopsTheProcessGroup(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "child")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "installer.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nsleep 300 &\necho $! > "+fifo+"\nwait\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := ExecRunner(ctx, Exec{Root: "/", Path: script, Env: []string{"PATH=/usr/bin:/bin"}})
		done <- err
	}()
	b, err := os.ReadFile(fifo) // blocks until the script has started its child
	if err != nil {
		t.Fatal(err)
	}
	child := strings.TrimSpace(string(b))
	pid, err := strconv.Atoi(child)
	if err != nil {
		t.Fatal(err)
	}
	// The child's exit is watched through a pidfd: SIGKILL is delivered
	// asynchronously, so "not running any more" is its exit, awaited.
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Close(pidfd) }()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a stopped installer reported success")
		}
	case <-time.After(2 * StopGrace): // a bound, not a synchronisation
		t.Fatalf("the stopped installer did not return within %s: its child %s runs on and keeps its output open", 2*StopGrace, child)
	}
	// ExecRunner has returned, its SIGKILL to the group sent: the child
	// exits at once, well within StopGrace (a bound, not a
	// synchronisation), or it outlived the installer.
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, int(StopGrace.Milliseconds()))
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("the installer's child %s outlived it", child)
	}
}
