package validate

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/marker"
)

func newChecker(t *testing.T, driver string) (Checker, *simhost.Host) {
	t.Helper()
	h, err := simhost.Create(t.TempDir(), simhost.Spec{Chip: "910b", ChipCount: 2, Driver: driver})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(h.Path("/usr/local/Ascend/driver"), 0o755); err != nil {
		t.Fatal(err)
	}
	return Checker{Host: h, Config: Config{
		NodeName: "n1", DriverRoot: "/usr/local/Ascend/driver", MarkerDir: "/run/npu-stack",
		DriverVersion: "25.5.0", RequireMarker: true,
	}}, h
}

func setMarker(t *testing.T, h *simhost.Host) {
	t.Helper()
	if err := (marker.Dir{Path: h.Path("/run/npu-stack")}).SetReady("25.5.0"); err != nil {
		t.Fatal(err)
	}
}

func TestCheckNamesEveryFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		driver string
		setup  func(*Checker, *simhost.Host)
		want   []string
	}{
		{name: "ready", driver: "25.5.0", setup: func(_ *Checker, h *simhost.Host) { setMarker(t, h) }},
		{name: "never installed", want: []string{"marker /run/npu-stack/driver-ready is missing", "no NPU driver is loaded", "npu-smi not found at /usr/local/sbin/npu-smi"}},
		{name: "boot without modules (a new kernel)", driver: "25.5.0", setup: func(_ *Checker, h *simhost.Host) {
			_ = h.Update(func(st *simhost.State) error { st.InstalledDriver = ""; return nil })
			_ = h.Reboot(context.Background(), host.RebootSystemd)
			if _, err := h.CompleteReboot(); err != nil {
				t.Fatal(err)
			}
		}, want: []string{"marker /run/npu-stack/driver-ready is missing", "no NPU driver is loaded", "npu-smi info failed with code 187"}},
		{name: "injector required, not registered", driver: "25.5.0", setup: func(c *Checker, h *simhost.Host) { setMarker(t, h); c.RequireInjector = true },
			want: []string{"node n1: the NRI injector is not registered with the container runtime (no live record in /run/npu-stack)", "cdi.inject=false"}},
		{name: "injector required and registered", driver: "25.5.0", setup: func(c *Checker, h *simhost.Host) {
			setMarker(t, h)
			c.RequireInjector = true
			release, err := (marker.Dir{Path: h.Path("/run/npu-stack")}).HoldInjector("npu-stack-inject")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(release)
		}},
		{name: "old version loaded", driver: "25.3.0", setup: func(_ *Checker, h *simhost.Host) { setMarker(t, h) },
			want: []string{"driver 25.3.0 is loaded, want 25.5.0"}},
		{name: "no driver root", driver: "25.5.0", setup: func(c *Checker, h *simhost.Host) { setMarker(t, h); c.DriverRoot = "/var/lib/Ascend/driver" },
			want: []string{"driver root /var/lib/Ascend/driver not found", "set driver.hostDriverPath"}},
		{name: "marker not required, any version", driver: "25.3.0", setup: func(c *Checker, _ *simhost.Host) { c.RequireMarker = false; c.DriverVersion = "" }},
		{name: "npu-smi garbage", driver: "25.5.0", setup: func(_ *Checker, h *simhost.Host) { setMarker(t, h); _ = h.SetSMI(simhost.SMIRaw, "oops\n", 0) },
			want: []string{"npu-smi shows no chips"}},
		{name: "marker only ignores the rest", setup: func(c *Checker, h *simhost.Host) { setMarker(t, h); c.MarkerOnly = true }},
		{name: "marker only, missing", setup: func(c *Checker, _ *simhost.Host) { c.MarkerOnly = true }, want: []string{"node n1: driver-ready marker"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, h := newChecker(t, tc.driver)
			if tc.setup != nil {
				tc.setup(&c, h)
			}
			err := c.Check(context.Background())
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected failure: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("check passed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestWaitReturnsWhenTheMarkerAppears(t *testing.T) {
	c, h := newChecker(t, "25.5.0")
	if err := os.MkdirAll(h.Path("/run/npu-stack"), 0o755); err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Wait(ctx, clk, time.Hour, log) }()
	// The poll is an hour on a clock that never moves: only the marker
	// watch can end the wait.
	for !clk.HasWaiters() {
		select {
		case err := <-done:
			t.Fatalf("wait ended early: %v", err)
		default:
		}
	}
	setMarker(t, h)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWaitGivesUpWithTheReason(t *testing.T) {
	c, _ := newChecker(t, "")
	log := logrus.New()
	log.SetOutput(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.Wait(ctx, clocktesting.NewFakeClock(time.Now()), time.Hour, log)
	if err == nil || !strings.Contains(err.Error(), "gave up waiting") || !strings.Contains(err.Error(), "no NPU driver is loaded") {
		t.Fatalf("error %v", err)
	}
}

// smiCounter counts npu-smi runs: each opens the davinci device nodes.
type smiCounter struct {
	*simhost.Host
	runs int
}

func (s *smiCounter) NPUSMI(ctx context.Context, args ...string) ([]byte, error) {
	s.runs++
	return s.Host.NPUSMI(ctx, args...)
}

// The device plugin's and exporter's gate opens no chip while the marker
// is missing (the driver pod holds the chips for an install): npu-smi
// runs only once the marker is back.
func TestWaitRunsNoNPUSMIWithoutTheMarker(t *testing.T) {
	c, h := newChecker(t, "25.5.0")
	counter := &smiCounter{Host: h}
	c.Host = counter
	log := logrus.New()
	log.SetOutput(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.Wait(ctx, clocktesting.NewFakeClock(time.Now()), time.Hour, log)
	if err == nil || !strings.Contains(err.Error(), "driver-ready marker") || counter.runs != 0 {
		t.Fatalf("without the marker: error %v, %d npu-smi runs; want the marker named and no npu-smi", err, counter.runs)
	}
	setMarker(t, h)
	if err := c.Wait(context.Background(), clocktesting.NewFakeClock(time.Now()), time.Hour, log); err != nil || counter.runs != 1 {
		t.Fatalf("with the marker: %v, %d npu-smi runs; want ready after one", err, counter.runs)
	}
}
