package memhost

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/openfuyao/npu-stack/internal/health"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

func TestRebootCycle(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	h := New(simhost.Spec{Chip: "910b", ChipCount: 8, Driver: "1.0.0"}, clk)
	ctx := context.Background()
	p := health.Prober{Host: h, Clock: clk, Timeout: time.Second}
	if r := p.Probe(ctx, 8); !r.OK {
		t.Fatalf("probe with a driver loaded: %s", r.Reason)
	}
	if err := h.InstallDriver(ctx, "2.0.0", nil); err == nil {
		t.Fatal("replacing a loaded driver without a reboot must fail")
	}
	before, _ := h.BootID()
	if h.CompleteReboot() {
		t.Fatal("no reboot was asked for")
	}
	if err := h.Reboot(ctx, host.RebootSystemd); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute)
	if !h.CompleteReboot() {
		t.Fatal("the requested reboot did not happen")
	}
	after, _ := h.BootID()
	if after == before || h.RebootPending() {
		t.Fatalf("boot ID %s -> %s, pending %v", before, after, h.RebootPending())
	}
	if up, _ := h.Uptime(); up != 0 {
		t.Fatalf("uptime right after boot = %s", up)
	}
	if r := p.Probe(ctx, 8); r.OK {
		t.Fatal("probe without a driver must fail")
	}
	if err := h.InstallDriver(ctx, "2.0.0", nil); err != nil {
		t.Fatal(err)
	}
	if v, _ := h.LoadedDriver(ctx); v != "2.0.0" {
		t.Fatalf("loaded %q", v)
	}
}

// A machine wedged for good probes unhealthy before and after a reboot.
func TestWedgeForeverSurvivesReboots(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	h := New(simhost.Spec{Chip: "910b", ChipCount: 8, Driver: "1.0.0"}, clk)
	ctx := context.Background()
	p := health.Prober{Host: h, Clock: clk, Timeout: time.Second}
	h.WedgeForever()
	if r := p.Probe(ctx, 8); r.OK {
		t.Fatal("a wedged machine probed healthy")
	}
	if err := h.Reboot(ctx, host.RebootSystemd); err != nil {
		t.Fatal(err)
	}
	h.CompleteReboot()
	if err := h.InstallDriver(ctx, "1.0.0", nil); err != nil {
		t.Fatal(err)
	}
	if r := p.Probe(ctx, 8); r.OK {
		t.Fatal("a machine wedged for good probed healthy after a reboot")
	}
}
