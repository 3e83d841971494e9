package marker

import (
	"os"
	"os/exec"
	"testing"
)

// heldByChild is set in the child process of TestInjectorDiesWithItsProcess:
// it holds the injector's record and waits to be killed.
const heldByChild = "NPU_STACK_MARKER_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(heldByChild); dir != "" {
		if _, err := (Dir{Path: dir}).HoldInjector("child"); err != nil {
			os.Exit(2)
		}
		_, _ = os.Stdout.WriteString("held\n")
		select {} // until killed
	}
	os.Exit(m.Run())
}

func TestInjectorIsRegisteredWhileHeld(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	if _, ok, err := d.Injector(); ok || err != nil {
		t.Fatalf("empty directory: registered=%t, err %v", ok, err)
	}
	release, err := d.HoldInjector("npu-stack-inject")
	if err != nil {
		t.Fatal(err)
	}
	if name, ok, err := d.Injector(); !ok || err != nil || name != "npu-stack-inject" {
		t.Fatalf("held: %q registered=%t, err %v", name, ok, err)
	}
	release()
	if _, ok, err := d.Injector(); ok || err != nil {
		t.Fatalf("released: registered=%t, err %v", ok, err)
	}
}

// TestInjectorDiesWithItsProcess kills an injector with SIGKILL, which
// runs none of its cleanup: its record stays on disk, but it no longer
// counts as registered.
func TestInjectorDiesWithItsProcess(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), heldByChild+"="+d.Path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 5)
	if _, err := out.Read(line); err != nil || string(line) != "held\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	if _, ok, err := d.Injector(); !ok || err != nil {
		t.Fatalf("child holds it: registered=%t, err %v", ok, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if _, ok, _ := d.read(nriFile); !ok {
		t.Fatal("the killed child's record is gone; the test shows nothing")
	}
	if _, ok, err := d.Injector(); ok || err != nil {
		t.Fatalf("killed child: registered=%t, err %v; want false", ok, err)
	}
}
