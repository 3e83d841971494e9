package agents

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/openfuyao/npu-stack/tests/bench/procstat"
)

// A small child of a big parent: wait4 reports the parent's peak, the exit
// stop the child's own.
func TestStatusAtExitIsTheChildsOwn(t *testing.T) {
	big := make([]byte, 128<<20)
	for i := range big {
		big[i] = 1
	}
	child, err := exec.LookPath("true")
	if err != nil {
		t.Skipf("no true(1) to run: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, err := statusAtExit(ctx, child)
	if err != nil {
		t.Fatal(err)
	}
	if u.PeakRSS <= 0 || u.PeakRSS > 32<<20 {
		t.Fatalf("child peak RSS %.1f MiB at exit: want a small positive figure", procstat.MiB(u.PeakRSS))
	}
	cmd := exec.CommandContext(ctx, child)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	maxrss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss * 1024
	t.Logf("child VmHWM at exit %.1f MiB; wait4 maxrss %.1f MiB (parent holds %d MiB)", procstat.MiB(u.PeakRSS), procstat.MiB(maxrss), len(big)>>20)
}
