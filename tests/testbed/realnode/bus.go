package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/godbus/dbus/v5"
)

// The node's system bus (docs/host-contract.md, section 8): Debian's
// dbus-daemon with its own system configuration (/usr/share/dbus-1/
// system.conf: the socket /run/dbus/system_bus_socket, EXTERNAL
// authentication, the policy files of /usr/share/dbus-1/system.d), a
// stand-in systemd owning org.freedesktop.systemd1 and, unless the node
// has none (Config.NoLogind), a stand-in logind owning
// org.freedesktop.login1 (logind.go).
const (
	dbusDaemon    = "/usr/bin/dbus-daemon"
	systemBusDir  = "/run/dbus"
	systemBusSock = systemBusDir + "/system_bus_socket"
	// systemdPolicy and logindPolicy are the bus policies systemd
	// installs for its names; logindService is the file by which the
	// bus activates logind (systemd v252.39 src/login/
	// org.freedesktop.login1.service).
	systemdPolicy = "/usr/share/dbus-1/system.d/org.freedesktop.systemd1.conf"
	logindPolicy  = "/usr/share/dbus-1/system.d/org.freedesktop.login1.conf"
	logindService = "/usr/share/dbus-1/system-services/org.freedesktop.login1.service"
)

// logindPolicyXML is the part of logind's bus policy (systemd v252.39,
// src/login/org.freedesktop.login1.conf) the node needs when its /usr
// lacks the file: root owns and calls org.freedesktop.login1; anyone may
// read its properties and call Inhibit and Reboot, which logind itself
// then authorises.
const logindPolicyXML = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
        "https://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
        <policy user="root">
                <allow own="org.freedesktop.login1"/>
                <allow send_destination="org.freedesktop.login1"/>
                <allow receive_sender="org.freedesktop.login1"/>
        </policy>
        <policy context="default">
                <deny send_destination="org.freedesktop.login1"/>
                <allow send_destination="org.freedesktop.login1"
                       send_interface="org.freedesktop.DBus.Properties"
                       send_member="Get"/>
                <allow send_destination="org.freedesktop.login1"
                       send_interface="org.freedesktop.DBus.Properties"
                       send_member="GetAll"/>
                <allow send_destination="org.freedesktop.login1"
                       send_interface="org.freedesktop.login1.Manager"
                       send_member="Inhibit"/>
                <allow send_destination="org.freedesktop.login1"
                       send_interface="org.freedesktop.login1.Manager"
                       send_member="Reboot"/>
        </policy>
</busconfig>
`

// systemdPolicyXML is the part of systemd's own bus policy
// (systemd v252, src/core/org.freedesktop.systemd1.conf) the node needs
// when its /usr lacks the file (a machine without the systemd package):
// root owns and calls org.freedesktop.systemd1; anyone may call
// StartUnit, which systemd itself then authorises.
const systemdPolicyXML = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
        "https://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
        <policy user="root">
                <allow own="org.freedesktop.systemd1"/>
                <allow send_destination="org.freedesktop.systemd1"/>
                <allow receive_sender="org.freedesktop.systemd1"/>
        </policy>
        <policy context="default">
                <deny send_destination="org.freedesktop.systemd1"/>
                <allow send_destination="org.freedesktop.systemd1"
                       send_interface="org.freedesktop.systemd1.Manager"
                       send_member="StartUnit"/>
        </policy>
</busconfig>
`

// bus is a boot's system bus: the dbus-daemon process and the stand-in
// systemd's and logind's connections.
type bus struct {
	daemon     *exec.Cmd
	done       chan struct{}
	conn       *dbus.Conn
	logindConn *dbus.Conn
	systemd    *standinSystemd
}

// startBus starts the node's dbus-daemon (`--system`, in the node's
// namespaces, as the node's init system would) and connects the stand-in
// systemd to it. Reading the address the daemon prints once it listens is
// the synchronisation.
func (n *Node) startBus(ctx context.Context) error {
	if _, err := os.Stat(n.Path(dbusDaemon)); err != nil {
		return fmt.Errorf("node %s: %s: %w; install the Debian package dbus (apt-get install dbus; .ci/run does)", n.cfg.Name, dbusDaemon, err)
	}
	if err := os.MkdirAll(n.Path(systemBusDir), 0o755); err != nil {
		return fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	for _, pol := range []struct{ usr, xml string }{{systemdPolicy, systemdPolicyXML}, {logindPolicy, logindPolicyXML}} {
		if _, err := os.Stat(n.Path(pol.usr)); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.MkdirAll(n.Path("/etc/dbus-1/system.d"), 0o755); err != nil {
			return fmt.Errorf("node %s: %w", n.cfg.Name, err)
		}
		if err := os.WriteFile(n.Path("/etc/dbus-1/system.d/"+filepath.Base(pol.usr)), []byte(pol.xml), 0o644); err != nil {
			return fmt.Errorf("node %s: %w", n.cfg.Name, err)
		}
	}
	if n.cfg.NoLogind {
		// A machine without logind has no file by which the bus would
		// start it: a call to org.freedesktop.login1 gets ServiceUnknown
		// from the bus (docs/host-contract.md, section 8). Removed
		// through the node's /usr overlay, the host's stays.
		if err := os.Remove(n.Path(logindService)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("node %s: %w", n.cfg.Name, err)
		}
	}
	log, err := os.OpenFile(n.LogPath("dbus"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	defer func() { _ = log.Close() }()
	cmd := exec.Command("nsenter", n.nsenterArgs(dbusDaemon, "--system", "--nofork", "--nopidfile", "--print-address=1")...)
	cmd.Env = []string{"PATH=" + nodePath}
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("node %s: start dbus-daemon: %w", n.cfg.Name, err)
	}
	b := &bus{daemon: cmd, done: make(chan struct{})}
	n.bus = b
	go func() { _ = cmd.Wait(); close(b.done) }()
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(line)
	}()
	select {
	case a := <-addr:
		if !strings.Contains(a, systemBusSock) {
			return fmt.Errorf("node %s: dbus-daemon listens on %q, want %s (log %s)", n.cfg.Name, a, systemBusSock, n.LogPath("dbus"))
		}
	case <-ctx.Done():
		return fmt.Errorf("node %s: waiting for dbus-daemon: %w", n.cfg.Name, ctx.Err())
	}
	if err := n.startSystemd(b); err != nil {
		return err
	}
	if n.logind == nil {
		return nil
	}
	conn, err := n.logind.connect("unix:path=" + n.Path(systemBusSock))
	if err != nil {
		return err
	}
	b.logindConn = conn
	return nil
}

// startSystemd connects the stand-in systemd to the node's bus as root
// (EXTERNAL authentication with this process's uid 0; the bus's policy
// lets only root own org.freedesktop.systemd1) and takes the name.
func (n *Node) startSystemd(b *bus) error {
	conn, err := dbus.Dial("unix:path=" + n.Path(systemBusSock))
	if err != nil {
		return fmt.Errorf("node %s: stand-in systemd: connect to the system bus: %w", n.cfg.Name, err)
	}
	b.conn = conn
	if err := conn.Auth(nil); err != nil {
		return fmt.Errorf("node %s: stand-in systemd: %w", n.cfg.Name, err)
	}
	if err := conn.Hello(); err != nil {
		return fmt.Errorf("node %s: stand-in systemd: %w", n.cfg.Name, err)
	}
	b.systemd = &standinSystemd{conn: conn, reboot: n.requestReboot}
	if err := conn.Export(b.systemd, systemdPath, systemdManager); err != nil {
		return fmt.Errorf("node %s: stand-in systemd: %w", n.cfg.Name, err)
	}
	reply, err := conn.RequestName(systemdName, dbus.NameFlagDoNotQueue)
	if err != nil {
		return fmt.Errorf("node %s: stand-in systemd: RequestName(%s): %w", n.cfg.Name, systemdName, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		return fmt.Errorf("node %s: stand-in systemd: RequestName(%s) = %v, want primary owner", n.cfg.Name, systemdName, reply)
	}
	return nil
}

// stop ends the bus: the stand-in systemd's connection, then the daemon.
func (b *bus) stop() {
	if b == nil {
		return
	}
	for _, c := range []*dbus.Conn{b.conn, b.logindConn} {
		if c != nil {
			_ = c.Close()
		}
	}
	if b.daemon != nil && b.daemon.Process != nil {
		_ = b.daemon.Process.Kill() // nsenter; the daemon dies with the node's init
		<-b.done
	}
}

const (
	systemdName    = "org.freedesktop.systemd1"
	systemdPath    = dbus.ObjectPath("/org/freedesktop/systemd1")
	systemdManager = "org.freedesktop.systemd1.Manager"
	rebootTarget   = "reboot.target"
)

// systemdJobModes are the job modes systemd knows (systemd v252,
// src/core/job.c job_mode_table).
var systemdJobModes = map[string]bool{
	"fail": true, "replace": true, "replace-irreversibly": true, "isolate": true, "flush": true,
	"ignore-dependencies": true, "ignore-requirements": true, "triggering": true,
}

// standinSystemd is org.freedesktop.systemd1's Manager as far as npu-stack
// uses it: StartUnit("reboot.target", mode) from a root caller queues a
// reboot of the node and answers with the job's path. What it does not
// implement it refuses as systemd does: other methods with UnknownMethod
// (godbus, as sd-bus), other units with NoSuchUnit, a bad mode with
// InvalidArgs, a caller that is not root with AccessDenied (systemd lets
// a peer of its own uid, root, start units without polkit: systemd
// src/libsystemd/sd-bus/bus-convenience.c sd_bus_query_sender_privilege at
// commit 018333725f9d, "Sender has same UID as us, then let's grant
// access"; the node has no polkit, so everyone else is refused).
type standinSystemd struct {
	conn   *dbus.Conn
	reboot func()
	mu     sync.Mutex
	jobs   uint32
}

// StartUnit is org.freedesktop.systemd1.Manager.StartUnit(s name, s mode) -> o job.
func (s *standinSystemd) StartUnit(sender dbus.Sender, name, mode string) (dbus.ObjectPath, *dbus.Error) {
	if !systemdJobModes[mode] {
		return "", dbus.NewError("org.freedesktop.DBus.Error.InvalidArgs", []any{"Job mode " + mode + " invalid"})
	}
	if name != rebootTarget {
		return "", dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit " + name + " not found."})
	}
	var uid uint32
	if err := s.conn.BusObject().Call("org.freedesktop.DBus.GetConnectionUnixUser", 0, string(sender)).Store(&uid); err != nil {
		return "", dbus.NewError("org.freedesktop.DBus.Error.Failed", []any{fmt.Sprintf("caller's credentials: %v", err)})
	}
	if uid != 0 {
		return "", dbus.NewError("org.freedesktop.DBus.Error.AccessDenied", []any{"Access denied"})
	}
	s.mu.Lock()
	s.jobs++
	job := dbus.ObjectPath(fmt.Sprintf("/org/freedesktop/systemd1/job/%d", s.jobs))
	s.mu.Unlock()
	// systemd answers once the job is queued and carries it out after:
	// the reboot stops the kubelet first, the bus last.
	go s.reboot()
	return job, nil
}

// RestartBus restarts the node's system bus as `systemctl restart dbus`
// does on a machine: the running dbus-daemon is stopped (SIGTERM, as
// systemd stops it; it removes its socket) and a new one listens on a new
// socket at the same path, with the stand-in systemd and logind connected
// again (logind keeps its inhibitors, as the process outlives the bus).
// Whoever bind-mounted the old socket file keeps a dead one; whoever
// mounted the directory /run/dbus sees the new socket.
func (n *Node) RestartBus(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped || n.bus == nil {
		return fmt.Errorf("node %s: no running system bus to restart", n.cfg.Name)
	}
	b := n.bus
	// nsenter forked the daemon into the node's PID namespace: the
	// daemon is its only child.
	pid := b.daemon.Process.Pid
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return fmt.Errorf("node %s: dbus-daemon, the child of nsenter %d: %w", n.cfg.Name, pid, err)
	}
	if len(strings.Fields(string(kids))) != 1 {
		return fmt.Errorf("node %s: nsenter %d has children %q, want dbus-daemon alone", n.cfg.Name, pid, kids)
	}
	daemon, err := strconv.Atoi(strings.Fields(string(kids))[0])
	if err != nil {
		return fmt.Errorf("node %s: dbus-daemon's pid: %w", n.cfg.Name, err)
	}
	for _, c := range []*dbus.Conn{b.conn, b.logindConn} {
		if c != nil {
			_ = c.Close()
		}
	}
	if err := syscall.Kill(daemon, syscall.SIGTERM); err != nil {
		return fmt.Errorf("node %s: stop dbus-daemon %d: %w", n.cfg.Name, daemon, err)
	}
	select {
	case <-b.done: // nsenter ends with its child
	case <-ctx.Done():
		return fmt.Errorf("node %s: waiting for dbus-daemon %d to stop: %w", n.cfg.Name, daemon, ctx.Err())
	}
	n.bus = nil
	return n.startBus(ctx)
}
