package host

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// busConfig is a minimal bus: one unix socket, EXTERNAL authentication
// (the peer's uid from the socket, as on a system bus), everything allowed.
const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// startBus runs a real dbus-daemon listening on a socket in a temporary
// directory and returns the socket path and the bus address. The address
// is printed by the daemon once it listens, so reading it is the
// synchronisation.
func startBus(t *testing.T) (socket, address string) {
	t.Helper()
	daemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Fatalf("dbus-daemon not found (%v): install the Debian package dbus (apt-get install dbus); this test runs the reboot against a real bus", err)
	}
	dir := t.TempDir()
	socket = filepath.Join(dir, "system_bus_socket")
	cfg := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, busConfig, socket), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(daemon, "--config-file="+cfg, "--nofork", "--print-address")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start dbus-daemon: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("dbus-daemon printed no address (%v); stderr:\n%s", err, stderr.String())
	}
	address = strings.TrimSpace(line)
	if !strings.Contains(address, socket) {
		t.Fatalf("dbus-daemon listens on %q, want the socket %s", address, socket)
	}
	return socket, address
}

type startUnitCall struct{ name, mode string }

// fakeSystemd stands in for systemd's Manager: it records the StartUnit
// calls and answers with reply (a job path) or with err (a D-Bus error).
type fakeSystemd struct {
	mu    sync.Mutex
	calls []startUnitCall
	err   *dbus.Error
	block chan struct{} // when set, StartUnit answers only once it is closed
}

func (f *fakeSystemd) StartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	f.mu.Lock()
	f.calls = append(f.calls, startUnitCall{name, mode})
	err, block := f.err, f.block
	f.mu.Unlock()
	if block != nil {
		<-block
	}
	if err != nil {
		return "", err
	}
	return "/org/freedesktop/systemd1/job/42", nil
}

func (f *fakeSystemd) Calls() []startUnitCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]startUnitCall(nil), f.calls...)
}

// badReplySystemd answers StartUnit with a string where systemd answers
// with the job's object path.
type badReplySystemd struct{}

func (badReplySystemd) StartUnit(_, _ string) (string, *dbus.Error) { return "queued", nil }

// serveSystemd connects to the bus, takes the name org.freedesktop.systemd1
// and exports v at /org/freedesktop/systemd1 with the Manager interface.
// RequestName returns once the bus has given us the name, so our reboot
// call can follow without waiting.
func serveSystemd(t *testing.T, address string, v any) {
	t.Helper()
	serveName(t, address, "org.freedesktop.systemd1", "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager", v)
}

// serveName connects to the bus, exports v at path with interface iface
// and takes the name.
func serveName(t *testing.T, address, name string, path dbus.ObjectPath, iface string, v any) {
	t.Helper()
	conn, err := dbus.Connect(address)
	if err != nil {
		t.Fatalf("stand-in %s: connect to %s: %v", name, address, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if err := conn.Export(v, path, iface); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName(name, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("stand-in %s: RequestName = %v, %v; want primary owner", name, reply, err)
	}
}

func TestSystemdRebootStartsRebootTarget(t *testing.T) {
	socket, address := startBus(t)
	fake := &fakeSystemd{}
	serveSystemd(t, address, fake)
	want := []startUnitCall{{"reboot.target", "replace-irreversibly"}}
	for i, method := range []RebootMethod{RebootSystemd, "systemctl"} {
		l := &Linux{DBusSocket: socket}
		if err := l.Reboot(context.Background(), method); err != nil {
			t.Fatalf("Reboot(%q): %v", method, err)
		}
		// systemd's reply is sent after the handler returned, so the call
		// is recorded by the time Reboot returns.
		if got := fake.Calls(); len(got) != i+1 || got[i] != want[0] {
			t.Fatalf("after Reboot(%q), systemd got StartUnit calls %v; want one more %v", method, got, want[0])
		}
	}
}

func TestSystemdRebootRefused(t *testing.T) {
	socket, address := startBus(t)
	fake := &fakeSystemd{err: dbus.NewError("org.freedesktop.DBus.Error.AccessDenied", []any{"Interactive authentication required."})}
	serveSystemd(t, address, fake)
	err := (&Linux{DBusSocket: socket}).Reboot(context.Background(), RebootSystemd)
	if err == nil {
		t.Fatal("Reboot succeeded although systemd refused it")
	}
	t.Log(err)
	for _, s := range []string{"Interactive authentication required.", "org.freedesktop.DBus.Error.AccessDenied", socket, "StartUnit", "uid 0", "rebooter.method=sysrq", "logind is not on this bus"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	if got := fake.Calls(); len(got) != 1 {
		t.Errorf("systemd got %d StartUnit calls, want 1", len(got))
	}
}

func TestSystemdRebootNoSuchUnit(t *testing.T) {
	socket, address := startBus(t)
	serveSystemd(t, address, &fakeSystemd{err: dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit reboot.target not found."})})
	err := (&Linux{DBusSocket: socket}).Reboot(context.Background(), RebootSystemd)
	if err == nil || !strings.Contains(err.Error(), "Unit reboot.target not found.") || !strings.Contains(err.Error(), "org.freedesktop.systemd1.NoSuchUnit") {
		t.Fatalf("Reboot = %v; want the NoSuchUnit error", err)
	}
}

func TestSystemdRebootBadReply(t *testing.T) {
	socket, address := startBus(t)
	serveSystemd(t, address, badReplySystemd{})
	err := (&Linux{DBusSocket: socket}).Reboot(context.Background(), RebootSystemd)
	if err == nil || !strings.Contains(err.Error(), "unexpected reply") || !strings.Contains(err.Error(), socket) {
		t.Fatalf("Reboot = %v; want an unexpected-reply error naming %s", err, socket)
	}
}

func TestSystemdRebootNobodyOwnsSystemd(t *testing.T) {
	socket, _ := startBus(t)
	err := (&Linux{DBusSocket: socket}).Reboot(context.Background(), RebootSystemd)
	if err == nil || !strings.Contains(err.Error(), "org.freedesktop.DBus.Error.ServiceUnknown") || !strings.Contains(err.Error(), "no systemd on this bus") || !strings.Contains(err.Error(), socket) {
		t.Fatalf("Reboot = %v; want ServiceUnknown from the bus, naming %s", err, socket)
	}
}

func TestSystemdRebootTimesOut(t *testing.T) {
	socket, address := startBus(t)
	fake := &fakeSystemd{block: make(chan struct{})}
	defer close(fake.block)
	serveSystemd(t, address, fake)
	const timeout = 300 * time.Millisecond
	start := time.Now()
	err := (&Linux{DBusSocket: socket, SystemdTimeout: timeout}).Reboot(context.Background(), RebootSystemd)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 300ms") || !strings.Contains(err.Error(), socket) {
		t.Fatalf("Reboot = %v; want a timeout naming %s", err, socket)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Reboot took %s with a %s timeout", took, timeout)
	}
}

func TestSystemdRebootNoSocket(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "system_bus_socket")
	err := (&Linux{DBusSocket: socket}).Reboot(context.Background(), RebootSystemd)
	if err == nil {
		t.Fatal("Reboot succeeded without a bus")
	}
	if _, ok := IsProblem(err); ok {
		t.Errorf("a missing socket is a mount to fix, not a security module: %v", err)
	}
	t.Log(err)
	for _, s := range []string{socket, "cannot connect", "ask logind (else systemd) for a reboot", "directory /run/dbus", "rebooter.method=sysrq"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

func TestNewLinuxUsesTheHostSystemBus(t *testing.T) {
	if got := NewLinux("/host").DBusSocket; got != "/run/dbus/system_bus_socket" {
		t.Errorf("NewLinux DBusSocket = %q", got)
	}
}
