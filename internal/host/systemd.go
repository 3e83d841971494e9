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

// DefaultSystemdTimeout bounds connecting to the system bus and systemd's
// answer to the reboot request.
const DefaultSystemdTimeout = 30 * time.Second

// What `systemctl reboot` asks of systemd: start reboot.target, replacing
// every queued job, and let no later job cancel it. systemd then stops all
// services, syncs and unmounts the filesystems and reboots.
const (
	systemdDest      = "org.freedesktop.systemd1"
	systemdPath      = dbus.ObjectPath("/org/freedesktop/systemd1")
	systemdStartUnit = "org.freedesktop.systemd1.Manager.StartUnit"
	rebootTarget     = "reboot.target"
	rebootJobMode    = "replace-irreversibly"
)

// systemdReboot asks the host's systemd, through the D-Bus system bus
// listening on socket, to reboot the machine cleanly. It returns once
// systemd has queued the reboot job, before the machine goes down; any
// failure (no bus, authentication refused, a D-Bus error reply from
// systemd, no or a malformed reply within timeout) is an error naming the
// socket, the call and what to check.
func systemdReboot(ctx context.Context, socket string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultSystemdTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	call := fmt.Sprintf("%s(%q, %q)", systemdStartUnit, rebootTarget, rebootJobMode)
	fail := func(what string, err error, hint string) error {
		// A connection closed under us by the deadline or a cancel: say
		// so rather than "use of closed network connection".
		switch ctxErr := ctx.Err(); {
		case errors.Is(ctxErr, context.DeadlineExceeded):
			err = fmt.Errorf("no answer within %s: %w", timeout, ctxErr)
		case ctxErr != nil:
			err = fmt.Errorf("cancelled: %w", ctxErr)
		}
		return fmt.Errorf("reboot through systemd: %s (D-Bus system bus socket %s, %s): %w; %s", what, socket, call, err, hint)
	}
	const (
		hintSocket = "mount the host's directory /run/dbus into the rebooter (hostPath, type Directory; the chart does with rebooter.method=systemd), point --dbus-socket at its system_bus_socket, or use rebooter.method=sysrq"
		hintAuth   = "run the rebooter as root (runAsUser: 0), or use rebooter.method=sysrq"
		hintCall   = "systemd allows StartUnit without polkit only to a root peer with CAP_SYS_ADMIN: run the rebooter as root with capability SYS_ADMIN (the chart's security context for rebooter.method=systemd); check that the host runs systemd; or use rebooter.method=sysrq"
	)

	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		if pe := connectRefused(socket, err); pe != nil {
			return pe
		}
		return fail("cannot connect", err, hintSocket)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok { // cannot happen for network "unix"
		_ = c.Close()
		return fail("cannot connect", fmt.Errorf("not a unix socket connection: %T", c), hintSocket)
	}
	// The connection's context is ours: when it expires godbus closes the
	// connection, which ends a hanging Auth, Hello or call.
	conn, err := dbus.DialUnix(uc, dbus.WithContext(ctx))
	if err != nil {
		_ = uc.Close()
		return fail("cannot connect", err, hintSocket)
	}
	defer func() { _ = conn.Close() }()
	// nil: godbus's default for a system bus, EXTERNAL with our effective
	// uid, which the bus verifies against the socket's peer credentials.
	if err := conn.Auth(nil); err != nil {
		return fail("authentication refused", err, hintAuth)
	}
	if err := conn.Hello(); err != nil {
		if pe := busRefused(socket, "Hello", err); pe != nil {
			return pe
		}
		return fail("bus registration (Hello) failed", err, hintSocket)
	}
	var job dbus.ObjectPath
	reply := conn.Object(systemdDest, systemdPath).CallWithContext(ctx, systemdStartUnit, 0, rebootTarget, rebootJobMode)
	if reply.Err != nil {
		var derr dbus.Error
		if errors.As(reply.Err, &derr) {
			if pe := busRefused(socket, systemdStartUnit, reply.Err); pe != nil {
				return pe
			}
			err := fmt.Errorf("%s: %w", derr.Name, reply.Err)
			switch derr.Name {
			case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
				return fail("no systemd on this bus", err, "check that the host's init is systemd and that the socket is the host's system bus; else use rebooter.method=sysrq")
			}
			return fail("systemd refused", err, hintCall)
		}
		return fail("call failed", reply.Err, hintCall)
	}
	if err := reply.Store(&job); err != nil || !job.IsValid() {
		if err == nil {
			err = fmt.Errorf("invalid job path %q", job)
		}
		return fail("unexpected reply", fmt.Errorf("want the object path of the reboot job, got %v: %w", reply.Body, err), "check that the peer owning "+systemdDest+" on this bus is the host's systemd")
	}
	return nil
}
