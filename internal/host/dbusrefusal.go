package host

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/godbus/dbus/v5"
)

// securityFix names the chart values that let the rebooter reach the
// host's system bus. SELinux: container_t is no system-bus client, spc_t
// is (containers/container-selinux v2.250.0, container.te l.720 and
// l.843-870). AppArmor: containerd's default profile has no dbus rule,
// and Unconfined sets none (containerd v2.3.4 contrib/apparmor/template.go,
// internal/cri/sputil/apparmor_linux.go).
const securityFix = "let the rebooter's container use the host's system bus: set rebooter.seLinuxOptions (default {type: spc_t}) on an SELinux host and rebooter.appArmorProfile (default {type: Unconfined}) on an AppArmor host (Ubuntu), or reboot without D-Bus with rebooter.method=sysrq or rebooter.fallbackMethod=sysrq"

// connectRefused is a connect(2) to an existing socket refused with
// EACCES or EPERM: with the socket there and the rebooter running as
// root, a security module (SELinux: "avc: denied { connectto }") said no,
// not the mount. Nil for any other failure.
func connectRefused(socket string, err error) error {
	if !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EPERM) {
		return nil
	}
	if _, serr := os.Stat(socket); errors.Is(serr, os.ErrNotExist) {
		return nil
	}
	return &ProblemError{
		What: fmt.Sprintf("connecting to the host's D-Bus system bus socket %s was refused (permission denied) although the socket exists: SELinux or AppArmor denies this container the system bus", socket),
		Fix:  securityFix,
		Err:  err,
	}
}

// busRefused is the bus answering a call with AccessDenied on behalf of
// AppArmor or SELinux. Under AppArmor's D-Bus mediation the connect
// succeeds and dbus-daemon replies "An AppArmor policy prevents this
// sender from sending this message to this recipient" (moby/moby issue
// #38442, henrygd/beszel issue #1408); with SELinux it names "SELinux
// policy". Nil for any other error.
func busRefused(socket, call string, err error) error {
	var derr dbus.Error
	if !errors.As(err, &derr) || derr.Name != "org.freedesktop.DBus.Error.AccessDenied" {
		return nil
	}
	msg := fmt.Sprint(derr.Body...)
	module := ""
	switch {
	case strings.Contains(msg, "AppArmor"):
		module = "AppArmor"
	case strings.Contains(msg, "SELinux"):
		module = "SELinux"
	default:
		return nil
	}
	return &ProblemError{
		What: fmt.Sprintf("%s denies this container the host's D-Bus system bus (socket %s): the bus refused %s", module, socket, call),
		Fix:  securityFix,
		Err:  err,
	}
}
