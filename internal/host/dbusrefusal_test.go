package host

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/godbus/dbus/v5"
)

// helperSocketEnv makes the test binary a helper that asks for a reboot
// through the socket it names and prints the error: run as another user,
// it meets the permission checks a confined container meets.
const helperSocketEnv = "NPU_STACK_TEST_DBUS_SOCKET"

func TestMain(m *testing.M) {
	if socket := os.Getenv(helperSocketEnv); socket != "" {
		err := (&Linux{DBusSocket: socket}).Reboot(context.Background(), RebootSystemd)
		_, problem := IsProblem(err)
		fmt.Printf("problem=%v\n%v\n", problem, err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A connect(2) refused with EACCES on a socket that is there is what
// SELinux does to container_t: the error is a host problem naming the
// security modules and the chart values, not the socket mount. Reproduced
// with the real kernel check: a real bus, its socket mode 0, connected to
// by a process that is not root.
func TestSystemdRebootConnectDenied(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (CI runs as root) to run the connecting process as another user")
	}
	socket, address := startBus(t)
	serveSystemd(t, address, &fakeSystemd{})
	for d := filepath.Dir(socket); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(socket, 0); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(filepath.Dir(socket), "helper")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{helperSocketEnv + "=" + socket}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	got := string(out)
	t.Log(got)
	for _, w := range []string{"problem=true", "permission denied", socket, "SELinux", "AppArmor", "rebooter.seLinuxOptions", "rebooter.appArmorProfile"} {
		if !strings.Contains(got, w) {
			t.Errorf("refused connect: %q lacks %q", got, w)
		}
	}
	if strings.Contains(got, "mount the host") {
		t.Errorf("refused connect blames the mount: %q", got)
	}
}

// The bus's answer under AppArmor's D-Bus mediation (the message quoted
// from moby/moby issue #38442) and under SELinux is a host problem naming
// the values; systemd's own refusal or a missing systemd are not.
func TestBusRefused(t *testing.T) {
	denied := func(msg string) error {
		return dbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied", Body: []any{msg}}
	}
	for _, tc := range []struct {
		err    error
		module string
	}{
		{denied(`An AppArmor policy prevents this sender from sending this message to this recipient; type="method_call", sender="(null)" (inactive) interface="org.freedesktop.DBus" member="Hello" error name="(unset)" requested_reply="0" destination="org.freedesktop.DBus" (bus)`), "AppArmor"},
		{denied(`An SELinux policy prevents this sender from sending this message to this recipient, 0 matched rules; type="method_call"`), "SELinux"},
		{denied("Interactive authentication required."), ""},
		{dbus.Error{Name: "org.freedesktop.DBus.Error.ServiceUnknown", Body: []any{"The name org.freedesktop.systemd1 was not provided by any .service files"}}, ""},
	} {
		err := busRefused("/run/dbus/system_bus_socket", "Hello", tc.err)
		if tc.module == "" {
			if err != nil {
				t.Errorf("busRefused(%v) = %v; want nil", tc.err, err)
			}
			continue
		}
		pe, ok := IsProblem(err)
		if !ok || !strings.Contains(pe.What, tc.module) || !strings.Contains(pe.Fix, "rebooter.appArmorProfile") || !strings.Contains(pe.Fix, "rebooter.seLinuxOptions") {
			t.Errorf("busRefused(%v) = %v; want a host problem naming %s and the values", tc.err, err, tc.module)
		}
	}
}
