package standin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// These tests run the stand-in driver package in a testNode (as root, as
// CI runs the tests): chrooted into a host root, as the driver pod runs
// it.

// stagedRun is where the tests put the package in the node (where the
// product's driver pod stages it, internal/host StagingDir).
const stagedRun = "/var/lib/npu-stack/installer/standin/driver.run"

// The installer's refusal (hicann/driver v8.5.0 driver_install.sh
// exitInstallInfo() l.416-422, printed by drvColorEcho, `echo -e`, with
// its colour codes) and the path its log names.
const (
	occupiedMessage = "[ERROR]\033[31mThe davinci nodes are occupied by some processes, please stop processes and install or uninstall again, details in : /var/log/ascend_seclog/ascend_install.log \033[0m\n"
	forceMessage    = "[INFO]If you want to install or uninstall the driver forcibly, add the force parameter. For details, see [--help].\n"
	installLog      = "/var/log/ascend_seclog/ascend_install.log"
	versionFile     = "/usr/local/Ascend/driver/version.info"
)

// installedNode is a test node with chips of u's model on which u's
// package was installed with no driver loaded, which loads it.
func installedNode(t *testing.T, u *UserSpace, chips int) *testNode {
	t.Helper()
	n := newTestNode(t)
	if err := AddDriverUser(n.at); err != nil {
		t.Fatal(err)
	}
	if err := WriteChips(n.at, NewChips(u.Model, chips)); err != nil {
		t.Fatal(err)
	}
	if err := u.WriteRun(n.at(stagedRun)); err != nil {
		t.Fatal(err)
	}
	if code, out := n.run(stagedRun, "--full", "--quiet", "--install-for-all"); code != 0 {
		t.Fatalf("first install: exit %d, want 0:\n%s", code, out)
	}
	for _, p := range []string{"/sys/module/drv_pcie_host", "/dev/davinci0", "/dev/davinci_manager", versionFile} {
		if _, err := os.Stat(n.at(p)); err != nil {
			t.Fatalf("after the first install: %v", err)
		}
	}
	return n
}

func (n *testNode) readFile(p string) string {
	n.t.Helper()
	b, err := os.ReadFile(n.at(p))
	if err != nil {
		n.t.Fatal(err)
	}
	return string(b)
}

// checkIntact fails unless the package of a complete install is in place.
func checkIntact(t *testing.T, n *testNode, when string) {
	t.Helper()
	if v := n.readFile(versionFile); !strings.HasPrefix(v, "Version=25.5.0\n") {
		t.Errorf("%s: version.info %q", when, v)
	}
	if info := n.readFile("/etc/ascend_install.info"); !strings.HasSuffix(info, "Driver_Install_Status=complete\n") {
		t.Errorf("%s: /etc/ascend_install.info does not end with Driver_Install_Status=complete:\n%s", when, info)
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	ko := "/lib/modules/" + unix.ByteSliceToString(uts.Release[:]) + "/updates/drv_pcie_host.ko"
	for _, p := range []string{ko, "/usr/local/Ascend/driver/lib64/driver/libdcmi.so", "/usr/local/bin/npu-smi", "/usr/local/dcmi/libdcmi.so"} {
		if _, err := os.Stat(n.at(p)); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}
}

// TestInstallerRefusesWhileChipsAreHeld: over a loaded driver, without
// --force, the package refuses as upstream's does while a process holds a
// chip's device node, leaving the installed package as it was; with
// --force, or once the holder has closed it, it installs (exit 2: the new
// modules load at the next boot).
func TestInstallerRefusesWhileChipsAreHeld(t *testing.T) {
	u := buildUserSpace(t)
	n := installedNode(t, u, 2)

	n.hold("/dev/davinci0")
	code, out := n.run(stagedRun, "--full", "--quiet")
	if code != 1 || !strings.Contains(out, occupiedMessage) || !strings.Contains(out, forceMessage) {
		t.Fatalf("install while pid 1 of the node holds /dev/davinci0: exit %d, want 1 and upstream's messages %q, %q; output:\n%s",
			code, occupiedMessage, forceMessage, out)
	}
	checkIntact(t, n, "after the refused install")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logText := n.readFile(installLog)
	for _, want := range []string{"[WARNING]/dev/davinci0 has user process: 1\n", "pid 1 holds /dev/davinci0: " + self} {
		if !strings.Contains(logText, want) {
			t.Errorf("the install log does not name the holder (%q):\n%s", want, logText)
		}
	}

	code, out = n.run(stagedRun, "--full", "--quiet", "--force")
	if code != 2 || strings.Contains(out, "occupied") {
		t.Errorf("install with --force while /dev/davinci0 is held: exit %d, want 2:\n%s", code, out)
	}
	checkIntact(t, n, "after the install with --force")

	n.unhold()
	code, out = n.run(stagedRun, "--full", "--quiet")
	if code != 2 || !strings.Contains(out, "Reboot needed for installation/upgrade to take effect!") {
		t.Errorf("install once the holder has closed /dev/davinci0: exit %d, want 2 and the reboot notice:\n%s", code, out)
	}
	checkIntact(t, n, "after the install")
}

// firmwareMessage is the installer's refusal on NPU firmware from which
// the package cannot be installed directly (hicann/driver v8.5.0
// env_check.sh please_change_RC1driver_package() l.244-248, drvEcho's
// "[Driver] [<date>] " before it, log_common.sh l.19-22).
const firmwareMessage = "[WARNING]Download and install the 23.0.RC1 driver package. Then upgrade to the target version. \n"

// TestInstallerRefusesFirmware: over a loaded driver, the package refuses
// as upstream's does, exit 1, when the firmware's version.info under the
// recorded install path has 11 as its version's second field, leaving the
// installed package as it was; other firmware lets it install.
func TestInstallerRefusesFirmware(t *testing.T) {
	u := buildUserSpace(t)
	n := installedNode(t, u, 2)
	fw := n.at("/usr/local/Ascend/firmware/version.info")
	if err := os.MkdirAll(filepath.Dir(fw), 0o755); err != nil {
		t.Fatal(err)
	}
	// Only the field upstream's awk -F. reads matters here.
	if err := os.WriteFile(fw, []byte("Version=6.11.0.1\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	code, out := n.run(stagedRun, "--full", "--quiet")
	if code != 1 || !strings.Contains(out, firmwareMessage) || !strings.Contains(out, "[INFO]End time: ") {
		t.Fatalf("install over firmware x.11: exit %d, want 1 and upstream's %q; output:\n%s", code, firmwareMessage, out)
	}
	checkIntact(t, n, "after the refused install")
	if err := os.WriteFile(fw, []byte("Version=7.7.0.1.231\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	if code, out := n.run(stagedRun, "--full", "--quiet"); code != 2 {
		t.Errorf("install over other firmware: exit %d, want 2:\n%s", code, out)
	}
	checkIntact(t, n, "after the install")
}

// TestInstallerPause: an installer over a loaded driver stops at the pause
// with the old package removed and the new one not yet copied; killed
// there it leaves the node half-installed; released, it finishes. A pause
// nobody reaches does not block Reached past its context.
func TestInstallerPause(t *testing.T) {
	u := buildUserSpace(t)
	n := installedNode(t, u, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := NewInstallerPause(n.at)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Remove() })

	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = p.Reached(short)
	stop()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reached with no installer running: %v, want the context's deadline", err)
	}

	halfInstalled := func(when string) {
		t.Helper()
		if _, err := os.Stat(n.at(versionFile)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: version.info: %v, want it missing", when, err)
		}
		info := n.readFile("/etc/ascend_install.info")
		if strings.Contains(info, "Driver_Install_Status=") || !strings.Contains(info, "Driver_Install_Path_Param=/usr/local/Ascend\n") {
			t.Errorf("%s: /etc/ascend_install.info should name the install path and lack Driver_Install_Status:\n%s", when, info)
		}
		if _, err := os.Stat(n.at("/sys/module/drv_pcie_host")); err != nil {
			t.Errorf("%s: the driver should still be loaded: %v", when, err)
		}
	}
	pid := n.start("", stagedRun, "--full", "--quiet")
	got, err := p.Reached(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != pid {
		t.Errorf("Reached returned PID %d, the installer is %d", got, pid)
	}
	halfInstalled("at the pause")
	n.kill(pid)
	if code, out := n.wait(pid); code != -1 {
		t.Fatalf("killed installer: exit %d, want killed by a signal:\n%s", code, out)
	}
	halfInstalled("after killing the paused installer")
	if _, err := os.Stat(n.at("/usr/local/Ascend/driver/lib64/driver/libdcmi.so")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after killing the paused installer: libdcmi.so of the old package: %v, want it removed", err)
	}

	pid = n.start("", stagedRun, "--full", "--quiet")
	if got, err = p.Reached(ctx); err != nil || got != pid {
		t.Fatalf("second installer: Reached %d, %v; want %d", got, err, pid)
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if code, out := n.wait(pid); code != 2 {
		t.Fatalf("released installer: exit %d, want 2:\n%s", code, out)
	}
	checkIntact(t, n, "after the released install")

	if err := p.Remove(); err != nil {
		t.Fatal(err)
	}
	if code, out := n.run(stagedRun, "--full", "--quiet"); code != 2 {
		t.Fatalf("install after the pause was removed: exit %d, want 2:\n%s", code, out)
	}
}

// TestInstallerNeedsProc: the stand-in cannot see holders without /proc
// (the real driver can), so over a loaded driver it refuses rather than
// let an install through that upstream might refuse.
func TestInstallerNeedsProc(t *testing.T) {
	u := buildUserSpace(t)
	n := installedNode(t, u, 1)
	// Shadow the node's /proc with an empty directory: a bind mount in the
	// helper's mount namespace, made by the installer's own shell.
	code, out := n.run("/bin/sh", "-c", fmt.Sprintf("mkdir -p /tmp/noproc && mount --bind /tmp/noproc /proc && exec %s --full --quiet", stagedRun))
	if code != 1 || !strings.Contains(out, "/proc is not mounted") {
		t.Fatalf("install without /proc over a loaded driver: exit %d, want 1:\n%s", code, out)
	}
	checkIntact(t, n, "after the refused install")
}
