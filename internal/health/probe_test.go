package health

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

func smiOutput(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "npusmi", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEvaluate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		out      []byte
		err      error
		expected int
		ok       bool
		reason   string
	}{
		{name: "8 healthy chips", out: smiOutput(t, "910b-8chips-ok.txt"), expected: 8, ok: true},
		{name: "count not checked when 0", out: smiOutput(t, "310p-pro-4chips.txt"), ok: true},
		{name: "a chip missing", out: smiOutput(t, "310p-pro-4chips.txt"), expected: 8, reason: "shows 4 chips, want 8"},
		{name: "critical and alarm chips", out: smiOutput(t, "910b-warning-critical.txt"), reason: "NPU 2 chip 0 Critical, NPU 3 chip 0 Alarm"},
		{name: "310P card critical", out: smiOutput(t, "310p-duo.txt"), reason: "NPU 4 chip 1 Critical"},
		{name: "non-zero exit", err: &host.ExitError{Command: "npu-smi info", Code: 255, Output: smiOutput(t, "error-dcmi.txt")}, reason: "code 255: dcmi module initialize failed"},
		{name: "garbage", out: []byte("Segmentation fault\n"), reason: "unreadable npu-smi info output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Evaluate(tc.out, tc.err, tc.expected)
			if r.OK != tc.ok || !strings.Contains(r.Reason, tc.reason) {
				t.Fatalf("Evaluate = ok %v reason %q; want ok %v reason containing %q", r.OK, r.Reason, tc.ok, tc.reason)
			}
		})
	}
}

func TestProbeHangFailsAtTimeoutOnTheClock(t *testing.T) {
	h, err := simhost.Create(t.TempDir(), simhost.Spec{Chip: "910b", ChipCount: 2, Driver: "25.3.0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetSMI(simhost.SMIHang, "", 0); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	p := Prober{Host: h, Clock: clk, Timeout: 30 * time.Second}
	done := make(chan Result, 1)
	go func() { done <- p.Probe(context.Background(), 0) }()
	// The probe is hung until the fake clock passes the timeout.
	for !clk.HasWaiters() {
		select {
		case r := <-done:
			t.Fatalf("probe returned before the timeout: %+v", r)
		default:
		}
	}
	clk.Step(30 * time.Second)
	r := <-done
	if r.OK || !strings.Contains(r.Reason, "hung: no answer within 30s") || r.Duration != 30*time.Second {
		t.Fatalf("hung probe: %+v", r)
	}
	_ = h.SetSMI(simhost.SMINormal, "", 0)
	if r := p.Probe(context.Background(), 2); !r.OK || len(r.Info.Chips) != 2 {
		t.Fatalf("healthy probe: %+v", r)
	}
}

// hangingSMI is a stand-in npu-smi whose hang exec cannot end: the script
// ignores SIGTERM, and what SIGKILL cannot reach is played by a descendant
// that keeps the output pipe open, so exec's Wait blocks exactly as it does
// on an npu-smi in uninterruptible sleep. Each start appends to a log;
// without the hang file it prints a healthy table. A start is logged
// only once its descendant is known, so that cleanup can always end it. It returns the
// directory to use as the host root.
func hangingSMI(t *testing.T) (root string, hang func(bool), starts func() int) {
	t.Helper()
	root = t.TempDir()
	table := smiOutput(t, "910b-8chips-ok.txt")
	if err := os.WriteFile(filepath.Join(root, "table.txt"), table, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `#!/bin/sh
trap '' TERM INT HUP
d=$(dirname "$0")
if [ -e "$d/hang" ]; then
	sleep 3600 &
	echo $! >> "$d/pids"
	echo start >> "$d/starts"
	wait
	exit 1
fi
echo start >> "$d/starts"
cat "$d/table.txt"
`
	if err := os.WriteFile(filepath.Join(root, "npu-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The stand-in's descendants outlive the test unless killed.
		b, _ := os.ReadFile(filepath.Join(root, "pids"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	hang = func(on bool) {
		t.Helper()
		p := filepath.Join(root, "hang")
		if on {
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		b, _ := os.ReadFile(filepath.Join(root, "pids"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = os.Remove(p)
	}
	starts = func() int {
		b, _ := os.ReadFile(filepath.Join(root, "starts"))
		return strings.Count(string(b), "start")
	}
	return root, hang, starts
}

// probeWithin runs p.Probe and fails the test if it does not return within
// limit of real time (a hung probe never would).
func probeWithin(t *testing.T, p Prober, limit time.Duration, beforeReturn func()) Result {
	t.Helper()
	done := make(chan Result, 1)
	go func() { done <- p.Probe(context.Background(), 8) }()
	if beforeReturn != nil {
		beforeReturn()
	}
	select {
	case r := <-done:
		return r
	case <-time.After(limit):
		t.Fatalf("probe did not return within %s: it waits for an npu-smi that never exits", limit)
		return Result{}
	}
}

func TestProbeAbandonsAnNPUSMIThatNeverExits(t *testing.T) {
	root, hang, starts := hangingSMI(t)
	clk := clocktesting.NewFakeClock(time.Now())
	p := NewProber(&host.Linux{Root: "/", NPUSMIPath: filepath.Join(root, "npu-smi")}, clk, 30*time.Second)
	if r := p.Probe(context.Background(), 8); !r.OK {
		t.Fatalf("stand-in npu-smi without hang: %+v", r)
	}

	hang(true)
	// The probe waits for its timeout on the clock, then gives up on the
	// child instead of waiting for it.
	r := probeWithin(t, p, 20*time.Second, func() {
		deadline := time.Now().Add(20 * time.Second)
		for starts() < 2 || !clk.HasWaiters() {
			if time.Now().After(deadline) {
				t.Errorf("the stand-in npu-smi was not started (%d starts)", starts())
				break
			}
			runtime.Gosched()
		}
		clk.Step(30 * time.Second)
	})
	if r.OK || !strings.Contains(r.Reason, "hung: no answer within 30s; left to the kernel") || r.Duration != 30*time.Second {
		t.Fatalf("hung probe: %+v", r)
	}

	// Still hung: the next probe fails at once and starts no second one.
	clk.Step(time.Minute)
	r = probeWithin(t, p, 20*time.Second, nil)
	if r.OK || !strings.Contains(r.Reason, "started 1m30s ago is still hung") || starts() != 2 {
		t.Fatalf("probe while the earlier npu-smi hangs: %+v, %d starts", r, starts())
	}

	// The device comes back: the abandoned child exits and is reaped, and
	// probing resumes.
	hang(false)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r = probeWithin(t, p, 20*time.Second, nil)
		if r.OK || time.Now().After(deadline) {
			break
		}
		runtime.Gosched()
	}
	if !r.OK || starts() != 3 {
		t.Fatalf("after the hang ended: %+v, %d starts", r, starts())
	}
}
