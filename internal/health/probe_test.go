package health

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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
