package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/godbus/dbus/v5"
)

// DefaultDBusSocket is where the host's D-Bus system bus listens. The chart
// mounts the host's directory /run/dbus (not the socket file, which a
// restarted dbus-daemon replaces) at the same path in the rebooter.
const DefaultDBusSocket = "/run/dbus/system_bus_socket"

// DefaultSystemdTimeout bounds connecting to the system bus and the
// answers of logind and, where logind is absent, systemd to the reboot
// request.
const DefaultSystemdTimeout = 30 * time.Second

// What `systemctl reboot` asks of systemd when it bypasses logind: start
// reboot.target, replacing every queued job, and let no later job cancel
// it. logind asks the same of systemd once its delay inhibitors are done
// (systemd v252.39 src/login/logind-dbus.c execute_shutdown_or_sleep:
// StartUnit(a->target, "replace-irreversibly")). systemd then stops all
// services, syncs and unmounts the filesystems and reboots.
const (
	systemdDest      = "org.freedesktop.systemd1"
	systemdPath      = dbus.ObjectPath("/org/freedesktop/systemd1")
	systemdStartUnit = "org.freedesktop.systemd1.Manager.StartUnit"
	rebootTarget     = "reboot.target"
	rebootJobMode    = "replace-irreversibly"
)

// Hints of the reboot errors. Neither logind nor systemd asks a root peer
// for a capability: both grant a caller of their own uid (0) without
// polkit (docs/host-contract.md, section 8, "Who may reboot over D-Bus").
const (
	hintSocket = "mount the host's directory /run/dbus into the rebooter (hostPath, type Directory; the chart does with rebooter.method=systemd), point --dbus-socket at its system_bus_socket, or use rebooter.method=sysrq"
	hintAuth   = "run the rebooter as root (runAsUser: 0), or use rebooter.method=sysrq"
	hintRoot   = "logind and systemd let only a caller of their own uid, root, reboot without asking polkit, and polkit refuses a caller without a login session: run the rebooter as uid 0 in the host's user namespace (runAsUser: 0, hostUsers not false; the chart's security context for rebooter.method=systemd); or use rebooter.method=sysrq"
)

// busSession is one reboot request over the system bus at socket, bounded
// by ctx (its deadline is timeout).
type busSession struct {
	ctx     context.Context
	socket  string
	timeout time.Duration
}

// fail is an error naming the socket, the call and what to check. A
// connection closed under us by the deadline or a cancel says so rather
// than "use of closed network connection".
func (s busSession) fail(via, call, what string, err error, hint string) error {
	switch ctxErr := s.ctx.Err(); {
	case errors.Is(ctxErr, context.DeadlineExceeded):
		err = fmt.Errorf("no answer within %s: %w", s.timeout, ctxErr)
	case ctxErr != nil:
		err = fmt.Errorf("cancelled: %w", ctxErr)
	}
	return fmt.Errorf("reboot through %s: %s (D-Bus system bus socket %s, %s): %w; %s", via, what, s.socket, call, err, hint)
}

// busReboot asks the host, through the D-Bus system bus listening on
// socket, to reboot cleanly: logind first, so that its delay inhibitors
// (the kubelet's graceful node shutdown) run before the reboot; systemd's
// StartUnit(reboot.target) only where no logind answers on the bus
// (logindAbsent). It returns once logind or systemd has accepted the
// reboot, before the machine goes down; any failure (no bus,
// authentication refused, a refusal, no or a malformed answer within
// timeout) is an error naming the socket, the call and what to check.
func busReboot(ctx context.Context, socket string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultSystemdTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s := busSession{ctx: ctx, socket: socket, timeout: timeout}
	conn, err := s.dial()
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	lerr := s.logindReboot(conn)
	if lerr == nil || judgeLogind(lerr) != logindAbsent {
		return lerr
	}
	if err := s.systemdReboot(conn); err != nil {
		return fmt.Errorf("%w (asked systemd because logind is not on this bus: %w)", err, lerr)
	}
	return nil
}

// dial connects to the bus, authenticates and registers (Hello).
func (s busSession) dial() (*dbus.Conn, error) {
	const via, call = "the system bus", "connect, to ask logind (else systemd) for a reboot"
	var d net.Dialer
	c, err := d.DialContext(s.ctx, "unix", s.socket)
	if err != nil {
		if pe := connectRefused(s.socket, err); pe != nil {
			return nil, pe
		}
		return nil, s.fail(via, call, "cannot connect", err, hintSocket)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok { // cannot happen for network "unix"
		_ = c.Close()
		return nil, s.fail(via, call, "cannot connect", fmt.Errorf("not a unix socket connection: %T", c), hintSocket)
	}
	// The connection's context is ours: when it expires godbus closes the
	// connection, which ends a hanging Auth, Hello or call.
	conn, err := dbus.DialUnix(uc, dbus.WithContext(s.ctx))
	if err != nil {
		_ = uc.Close()
		return nil, s.fail(via, call, "cannot connect", err, hintSocket)
	}
	// nil: godbus's default for a system bus, EXTERNAL with our effective
	// uid, which the bus verifies against the socket's peer credentials.
	if err := conn.Auth(nil); err != nil {
		_ = conn.Close()
		return nil, s.fail(via, call, "authentication refused", err, hintAuth)
	}
	if err := conn.Hello(); err != nil {
		_ = conn.Close()
		if pe := busRefused(s.socket, "Hello", err); pe != nil {
			return nil, pe
		}
		return nil, s.fail(via, call, "bus registration (Hello) failed", err, hintSocket)
	}
	return conn, nil
}

// systemdReboot asks systemd to start reboot.target, as `systemctl
// reboot` does when logind is not there, and checks that the answer is
// the object path of the queued job.
func (s busSession) systemdReboot(conn *dbus.Conn) error {
	const via = "systemd"
	call := fmt.Sprintf("%s(%q, %q)", systemdStartUnit, rebootTarget, rebootJobMode)
	var job dbus.ObjectPath
	reply := conn.Object(systemdDest, systemdPath).CallWithContext(s.ctx, systemdStartUnit, 0, rebootTarget, rebootJobMode)
	if reply.Err != nil {
		var derr dbus.Error
		if errors.As(reply.Err, &derr) {
			if pe := busRefused(s.socket, systemdStartUnit, reply.Err); pe != nil {
				return pe
			}
			err := fmt.Errorf("%s: %w", derr.Name, reply.Err)
			switch derr.Name {
			case errServiceUnknown, errNameHasNoOwner:
				return s.fail(via, call, "no systemd on this bus", err, "check that the host's init is systemd and that the socket is the host's system bus; else use rebooter.method=sysrq")
			}
			return s.fail(via, call, "systemd refused", err, hintRoot)
		}
		return s.fail(via, call, "call failed", reply.Err, hintRoot)
	}
	if err := reply.Store(&job); err != nil || !job.IsValid() {
		if err == nil {
			err = fmt.Errorf("invalid job path %q", job)
		}
		return s.fail(via, call, "unexpected reply", fmt.Errorf("want the object path of the reboot job, got %v: %w", reply.Body, err), "check that the peer owning "+systemdDest+" on this bus is the host's systemd")
	}
	return nil
}
