package procstat

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// childEnv makes this test binary act as the child of the tests below.
const childEnv = "NPU_PROCSTAT_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "burn":
		// A fixed amount of work (not a wall-clock loop, whose CPU time
		// would depend on the machine's load) and 48 MiB touched, so both
		// figures are the child's own.
		b := make([]byte, 48<<20)
		for round := 0; round < 40; round++ {
			for i := 0; i < len(b); i += 64 {
				b[i] += byte(round)
			}
		}
		runtime.KeepAlive(b)
		os.Exit(0)
	case "fail":
		os.Exit(3)
	}
}

func child(t *testing.T, mode string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	return cmd
}

// A child smaller than its parent: wait4 reports the parent's peak, the
// exit stop the child's own.
func TestRunToExitReadsTheChildsOwnPeak(t *testing.T) {
	big := make([]byte, 160<<20)
	for i := range big {
		big[i] = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, err := RunToExit(ctx, child(t, "burn"))
	if err != nil {
		t.Fatal(err)
	}
	if u.PeakRSS < 48<<20 || u.PeakRSS > 120<<20 {
		t.Errorf("child peak RSS %.1f MiB at exit: want the child's 48 MiB and its runtime, not the parent's %d MiB", MiB(u.PeakRSS), len(big)>>20)
	}
	if u.CPU < 20*time.Millisecond {
		t.Errorf("child CPU %s: it wrote 48 MiB forty times over", u.CPU)
	}
	cmd := child(t, "burn")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	maxrss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss * 1024
	t.Logf("child VmHWM at exit %.1f MiB, CPU %s; wait4 maxrss %.1f MiB (parent holds %d MiB)", MiB(u.PeakRSS), u.CPU, MiB(maxrss), len(big)>>20)
	big[0]++ // keep it alive across the second run
}

func TestRunToExitReportsAFailedChild(t *testing.T) {
	u, err := RunToExit(context.Background(), child(t, "fail"))
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("want the exit status in the error, got %v", err)
	}
	if u.PeakRSS == 0 {
		t.Errorf("a failed child's memory is still read at its exit")
	}
}

func TestRunToExitKillsOnContextEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	cmd := exec.Command("sleep", "60")
	start := time.Now()
	_, err := RunToExit(ctx, cmd)
	if err == nil {
		t.Fatal("a killed child is an error")
	}
	if time.Since(start) > 30*time.Second {
		t.Fatalf("not killed when its context ended: %v", err)
	}
}

func TestRunToExitRefusesWhatItCannotReap(t *testing.T) {
	var sb strings.Builder
	cmd := child(t, "burn")
	cmd.Stdout = &sb
	if _, err := RunToExit(context.Background(), cmd); err == nil || !strings.Contains(err.Error(), "must go to a file") {
		t.Fatalf("want a refusal of a non-file Stdout, got %v", err)
	}
	cmd = exec.CommandContext(context.Background(), "true")
	if _, err := RunToExit(context.Background(), cmd); err == nil || !strings.Contains(err.Error(), "exec.Command") {
		t.Fatalf("want a refusal of CommandContext, got %v", err)
	}
}
