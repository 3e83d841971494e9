package host

import (
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"
)

// What `systemctl reboot` asks first (systemd v252.39
// src/systemctl/systemctl-logind.c logind_reboot: RebootWithFlags, or
// Reboot on a logind older than v248): logind's
// org.freedesktop.login1.Manager.Reboot(interactive), which every logind
// version has, and which means the same as RebootWithFlags(0). logind
// then announces the shutdown with the signal PrepareForShutdown(true),
// waits until every delay inhibitor of "shutdown" is released, at most
// InhibitDelayMaxSec (5 s unless logind.conf says otherwise), and only
// then asks systemd for reboot.target (src/login/logind-dbus.c
// method_reboot -> method_do_shutdown_or_sleep ->
// bus_manager_shutdown_or_sleep_now_or_later, delay_shutdown_or_sleep,
// execute_shutdown_or_sleep). The kubelet's graceful node shutdown is
// such a delay inhibitor (k8s.io/kubernetes
// pkg/kubelet/nodeshutdown/systemd/inhibit_linux.go InhibitShutdown):
// asking systemd directly would skip it.
const (
	logindDest   = "org.freedesktop.login1"
	logindPath   = dbus.ObjectPath("/org/freedesktop/login1")
	logindReboot = "org.freedesktop.login1.Manager.Reboot"
	// logindInteractive is Reboot's argument. false: the rebooter has no
	// polkit agent to answer a password prompt. It changes nothing for a
	// root caller, which logind never sends to polkit
	// (verify_shutdown_creds -> bus_verify_polkit_async ->
	// sd_bus_query_sender_privilege, docs/host-contract.md section 8).
	logindInteractive = false
)

// D-Bus error names the reboot request can meet, each where its source
// sets it.
const (
	// The bus: no connection owns the name and no .service file
	// provides it (dbus 1.14.10 bus/activation.c activation_find_entry,
	// "The name %s was not provided by any .service files").
	errServiceUnknown = "org.freedesktop.DBus.Error.ServiceUnknown"
	// The bus: no connection owns the name and the caller forbade
	// activation (bus/dispatch.c bus_dispatch, "Name \"%s\" does not
	// exist").
	errNameHasNoOwner = "org.freedesktop.DBus.Error.NameHasNoOwner"
	// systemd's answer to the bus's activation request for
	// dbus-org.freedesktop.login1.service, which dbus-daemon passes on
	// to the caller (systemd src/core/dbus.c signal_activation_request ->
	// ActivationFailure; src/core/dbus-unit.c
	// bus_unit_validate_load_state; dbus bus/activation.c
	// bus_activation_systemd_failure): logind's unit is masked or not
	// installed.
	errUnitMasked = "org.freedesktop.systemd1.UnitMasked"
	errNoSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
	// logind: a shutdown or sleep is already under way
	// (method_do_shutdown_or_sleep; src/libsystemd/sd-bus/
	// bus-common-errors.h BUS_ERROR_OPERATION_IN_PROGRESS).
	errOperationInProgress = "org.freedesktop.login1.OperationInProgress"
)

// logindVerdict is what the rebooter makes of logind's answer to Reboot.
type logindVerdict int

const (
	// logindRebooting: logind accepted; it reboots once the delay
	// inhibitors are done.
	logindRebooting logindVerdict = iota
	// logindAbsent: nothing provides org.freedesktop.login1 on this bus,
	// or logind's unit cannot be started. Nobody else can hold a delay
	// inhibitor then, so systemd's StartUnit loses nothing.
	logindAbsent
	// logindRefused: logind, or the bus on its behalf, said no, or did
	// not answer. Going round it to systemd would override what logind
	// decided (a block inhibitor, a shutdown already under way) or hide
	// a hung logind, so the rebooter reports it and retries, and the
	// reboot agent's --fallback-method (sysrq) is the way round.
	logindRefused
)

func (v logindVerdict) String() string {
	switch v {
	case logindRebooting:
		return "rebooting"
	case logindAbsent:
		return "absent"
	default:
		return "refused"
	}
}

// judgeLogind classifies the error of the Reboot call: only the bus's
// "nobody provides this name" answers, and systemd's "this unit cannot be
// started" for logind's activation, mean logind is absent.
func judgeLogind(err error) logindVerdict {
	if err == nil {
		return logindRebooting
	}
	var derr dbus.Error
	if !errors.As(err, &derr) {
		return logindRefused
	}
	switch derr.Name {
	case errServiceUnknown, errNameHasNoOwner, errUnitMasked, errNoSuchUnit:
		return logindAbsent
	default:
		return logindRefused
	}
}

// logindReboot asks logind to reboot the machine. Nil once logind has
// accepted (it replies before the delay inhibitors are done and before
// the machine goes down).
func (s busSession) logindReboot(conn *dbus.Conn) error {
	const via = "logind"
	call := fmt.Sprintf("%s(%v)", logindReboot, logindInteractive)
	reply := conn.Object(logindDest, logindPath).CallWithContext(s.ctx, logindReboot, 0, logindInteractive)
	if reply.Err == nil {
		return nil
	}
	var derr dbus.Error
	if !errors.As(reply.Err, &derr) {
		return s.fail(via, call, "call failed", reply.Err, hintRoot)
	}
	if pe := busRefused(s.socket, logindReboot, reply.Err); pe != nil {
		return pe
	}
	err := fmt.Errorf("%s: %w", derr.Name, reply.Err)
	switch {
	case judgeLogind(reply.Err) == logindAbsent:
		return s.fail(via, call, "no logind on this bus", err, "the rebooter asks systemd instead")
	case derr.Name == errOperationInProgress:
		return s.fail(via, call, "logind is already shutting down or suspending the machine", err, "wait for that operation (loginctl list-inhibitors, journalctl -u systemd-logind on the node); the rebooter tries again")
	default:
		return s.fail(via, call, "logind refused", err, hintRoot)
	}
}
