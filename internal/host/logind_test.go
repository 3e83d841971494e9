package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

func TestJudgeLogind(t *testing.T) {
	derr := func(name string) error { return dbus.Error{Name: name, Body: []any{"message"}} }
	for _, tc := range []struct {
		name string
		err  error
		want logindVerdict
	}{
		{"accepted", nil, logindRebooting},
		{"no owner, no .service file", derr("org.freedesktop.DBus.Error.ServiceUnknown"), logindAbsent},
		{"no owner, no activation", derr("org.freedesktop.DBus.Error.NameHasNoOwner"), logindAbsent},
		{"logind's unit masked", derr("org.freedesktop.systemd1.UnitMasked"), logindAbsent},
		{"logind's unit not installed", derr("org.freedesktop.systemd1.NoSuchUnit"), logindAbsent},
		{"wrapped as the rebooter wraps it", fmt.Errorf("reboot through logind: %w", derr("org.freedesktop.DBus.Error.ServiceUnknown")), logindAbsent},
		{"a caller that is not root, no polkit", derr("org.freedesktop.DBus.Error.AccessDenied"), logindRefused},
		{"a caller that is not root, polkit asks", derr("org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"), logindRefused},
		{"a shutdown under way", derr("org.freedesktop.login1.OperationInProgress"), logindRefused},
		{"something else owns the name", derr("org.freedesktop.DBus.Error.UnknownMethod"), logindRefused},
		{"logind hangs", fmt.Errorf("no answer within 30s: %w", context.DeadlineExceeded), logindRefused},
		{"connection lost", errors.New("dbus: connection closed by user"), logindRefused},
	} {
		if got := judgeLogind(tc.err); got != tc.want {
			t.Errorf("%s: judgeLogind(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// fakeLogind stands in for logind's Manager: it records the Reboot calls
// and answers with err or, when block is set, only once it is closed.
type fakeLogind struct {
	mu    sync.Mutex
	calls []bool
	err   *dbus.Error
	block chan struct{}
}

func (f *fakeLogind) Reboot(interactive bool) *dbus.Error {
	f.mu.Lock()
	f.calls = append(f.calls, interactive)
	err, block := f.err, f.block
	f.mu.Unlock()
	if block != nil {
		<-block
	}
	return err
}

func (f *fakeLogind) Calls() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bool(nil), f.calls...)
}

func serveLogind(t *testing.T, address string, f *fakeLogind) {
	t.Helper()
	serveName(t, address, "org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager", f)
}

// With logind on the bus the reboot is logind's Reboot(false) and systemd
// is not asked: logind asks it once its delay inhibitors are done.
func TestRebootAsksLogindFirst(t *testing.T) {
	socket, address := startBus(t)
	logind, systemd := &fakeLogind{}, &fakeSystemd{}
	serveLogind(t, address, logind)
	serveSystemd(t, address, systemd)
	if err := (&Linux{DBusSocket: socket}).Reboot(context.Background(), RebootSystemd); err != nil {
		t.Fatalf("Reboot: %v", err)
	}
	if got := logind.Calls(); len(got) != 1 || got[0] {
		t.Errorf("logind got Reboot calls %v; want one Reboot(false)", got)
	}
	if got := systemd.Calls(); len(got) != 0 {
		t.Errorf("systemd got StartUnit calls %v although logind accepted the reboot", got)
	}
}

// Where logind's unit cannot be started, the bus passes systemd's
// activation error on; the rebooter asks systemd then.
func TestRebootLogindUnitMaskedFallsBack(t *testing.T) {
	socket, address := startBus(t)
	logind := &fakeLogind{err: dbus.NewError("org.freedesktop.systemd1.UnitMasked", []any{"Unit dbus-org.freedesktop.login1.service is masked."})}
	systemd := &fakeSystemd{}
	serveLogind(t, address, logind)
	serveSystemd(t, address, systemd)
	if err := (&Linux{DBusSocket: socket}).Reboot(context.Background(), RebootSystemd); err != nil {
		t.Fatalf("Reboot: %v", err)
	}
	if got := systemd.Calls(); len(got) != 1 || got[0] != (startUnitCall{"reboot.target", "replace-irreversibly"}) {
		t.Errorf("systemd got StartUnit calls %v; want one StartUnit(reboot.target, replace-irreversibly)", got)
	}
}

// Without logind on the bus (ServiceUnknown from the bus) the reboot is
// systemd's StartUnit; TestSystemdRebootStartsRebootTarget checks the
// call, this the order.
func TestRebootWithoutLogindAsksSystemd(t *testing.T) {
	socket, address := startBus(t)
	systemd := &fakeSystemd{}
	serveSystemd(t, address, systemd)
	if err := (&Linux{DBusSocket: socket}).Reboot(context.Background(), RebootSystemd); err != nil {
		t.Fatalf("Reboot: %v", err)
	}
	if got := systemd.Calls(); len(got) != 1 {
		t.Errorf("systemd got StartUnit calls %v; want one", got)
	}
}

// A refusal by logind, or no answer, is reported and never taken round
// logind to systemd.
func TestRebootLogindRefusedIsNoFallback(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  *dbus.Error
		want []string
	}{
		{"not-root-no-polkit", dbus.NewError("org.freedesktop.DBus.Error.AccessDenied", []any{"Access denied"}),
			[]string{"logind refused", "org.freedesktop.DBus.Error.AccessDenied", "Access denied", "uid 0", "hostUsers", "rebooter.method=sysrq", "Manager.Reboot(false)"}},
		{"not-root-polkit", dbus.NewError("org.freedesktop.DBus.Error.InteractiveAuthorizationRequired", []any{"Interactive authentication required."}),
			[]string{"logind refused", "Interactive authentication required.", "uid 0"}},
		{"shutdown-under-way", dbus.NewError("org.freedesktop.login1.OperationInProgress", []any{"There's already a shutdown or sleep operation in progress"}),
			[]string{"already shutting down", "There's already a shutdown or sleep operation in progress", "loginctl list-inhibitors"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			socket, address := startBus(t)
			systemd := &fakeSystemd{}
			serveLogind(t, address, &fakeLogind{err: tc.err})
			serveSystemd(t, address, systemd)
			err := (&Linux{DBusSocket: socket}).Reboot(context.Background(), RebootSystemd)
			if err == nil {
				t.Fatal("Reboot succeeded although logind refused it")
			}
			t.Log(err)
			for _, s := range append(tc.want, socket) {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			if got := systemd.Calls(); len(got) != 0 {
				t.Errorf("systemd got StartUnit calls %v after logind refused", got)
			}
		})
	}
}

func TestRebootLogindTimesOut(t *testing.T) {
	socket, address := startBus(t)
	logind, systemd := &fakeLogind{block: make(chan struct{})}, &fakeSystemd{}
	defer close(logind.block)
	serveLogind(t, address, logind)
	serveSystemd(t, address, systemd)
	const timeout = 300 * time.Millisecond
	err := (&Linux{DBusSocket: socket, SystemdTimeout: timeout}).Reboot(context.Background(), RebootSystemd)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 300ms") || !strings.Contains(err.Error(), "logind") {
		t.Fatalf("Reboot = %v; want logind's timeout", err)
	}
	if got := systemd.Calls(); len(got) != 0 {
		t.Errorf("systemd got StartUnit calls %v after logind did not answer", got)
	}
}
