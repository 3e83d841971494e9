// Package validate answers "is the NPU driver on this node ready for
// workloads?" for the device plugin's init gate and the driver pod's
// readiness probe: the desired version is loaded, npu-smi sees the chips,
// the driver-ready marker is present. Every failed check says what is
// wrong and where to look.
package validate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/marker"
	"github.com/openfuyao/npu-stack/internal/npusmi"
)

// Config selects the checks. Paths are host paths; Host maps them.
type Config struct {
	NodeName   string
	DriverRoot string
	MarkerDir  string
	// DriverVersion is the version that must be loaded; "" accepts any
	// loaded driver (a pre-installed one).
	DriverVersion string
	RequireMarker bool
	// MarkerOnly checks nothing but the marker: the readiness probe runs
	// every few seconds and must not start npu-smi each time.
	MarkerOnly bool
	// SMITimeout bounds npu-smi; a hang fails the check.
	SMITimeout time.Duration
	// RequireInjector also requires the NRI injector's registration
	// (marker nri-injector): the device plugin's gate, so that no chip is
	// advertised before a container allocated one gets the driver's user
	// space (cdi.inject).
	RequireInjector bool
}

// Checker runs the checks against a host.
type Checker struct {
	Config
	Host host.Host
}

func (c Checker) node() string {
	if c.NodeName == "" {
		return "this node"
	}
	return "node " + c.NodeName
}

// Check runs every selected check and returns all failures joined, nil
// when the driver is ready.
func (c Checker) Check(ctx context.Context) error {
	if c.MarkerOnly {
		return c.checkMarker()
	}
	var errs []error
	if c.RequireMarker {
		errs = append(errs, c.checkMarker())
	}
	if c.RequireInjector {
		errs = append(errs, c.checkInjector())
	}
	errs = append(errs, c.checkDriverRoot(), c.checkVersion(ctx), c.checkChips(ctx))
	return errors.Join(errs...)
}

func (c Checker) checkInjector() error {
	_, ok, err := marker.Dir{Path: c.Host.Path(c.MarkerDir)}.Injector()
	if err != nil {
		return fmt.Errorf("%s: %w", c.node(), err)
	}
	if !ok {
		return fmt.Errorf("%s: the NRI injector is not registered with the container runtime (no live record in %s): see the log of this node's npu-stack nri-injector pod; without NRI in the runtime set cdi.inject=false and mount the driver by hostPath (docs/workloads.md)", c.node(), c.MarkerDir)
	}
	return nil
}

func (c Checker) checkMarker() error {
	_, ok, err := marker.Dir{Path: c.Host.Path(c.MarkerDir)}.Ready()
	if err != nil {
		return fmt.Errorf("%s: %w", c.node(), err)
	}
	if !ok {
		return fmt.Errorf("%s: driver-ready marker %s/%s is missing: the driver pod has not finished loading the driver, or the health-watch found the chips wedged (kubectl get events --field-selector involvedObject.kind=Node,involvedObject.name=<node>)",
			c.node(), c.MarkerDir, contract.MarkerFile)
	}
	return nil
}

func (c Checker) checkDriverRoot() error {
	if c.DriverRoot == "" {
		return nil
	}
	st, err := os.Stat(c.Host.Path(c.DriverRoot))
	if err != nil || !st.IsDir() {
		return fmt.Errorf("%s: driver root %s not found: the driver is not installed there; set driver.hostDriverPath to where the driver lives (often /usr/local/Ascend/driver or /var/lib/Ascend/driver)", c.node(), c.DriverRoot)
	}
	return nil
}

func (c Checker) checkVersion(ctx context.Context) error {
	loaded, err := c.Host.LoadedDriver(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("%s: read the loaded driver version: %w", c.node(), err)
	case loaded == "":
		return fmt.Errorf("%s: no NPU driver is loaded in the kernel yet (the driver pod installs it on boot)", c.node())
	case c.DriverVersion != "" && loaded != c.DriverVersion:
		return fmt.Errorf("%s: driver %s is loaded, want %s: a running driver is never unloaded, the next reboot (scheduled by the rollout) activates %s", c.node(), loaded, c.DriverVersion, c.DriverVersion)
	}
	return nil
}

func (c Checker) checkChips(ctx context.Context) error {
	timeout := c.SMITimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := c.Host.NPUSMI(sctx, "info")
	if err != nil {
		if ee, ok := host.IsExitError(err); ok {
			return fmt.Errorf("%s: npu-smi info failed with code %d (%s): the driver cannot reach the chips", c.node(), ee.Code, firstLine(ee.Output))
		}
		return fmt.Errorf("%s: npu-smi info: %w", c.node(), err)
	}
	info, err := npusmi.Parse(out)
	if err != nil {
		return fmt.Errorf("%s: npu-smi shows no chips: %w", c.node(), err)
	}
	if len(info.Chips) == 0 {
		return fmt.Errorf("%s: npu-smi shows no chips", c.node())
	}
	return nil
}

func firstLine(b []byte) string {
	for i, ch := range b {
		if ch == '\n' {
			return string(b[:i])
		}
	}
	if len(b) == 0 {
		return "no output"
	}
	return string(b)
}

// gate is Check without npu-smi while the marker is missing: the driver
// pod takes it away while it holds the chips for an install (or a wedge
// took it), and the device plugin's and exporter's gates wait here then;
// npu-smi would open the davinci nodes the vendor installer needs free.
// The checks that read only files still say what is wrong.
func (c Checker) gate(ctx context.Context) error {
	if !c.RequireMarker || c.MarkerOnly {
		return c.Check(ctx)
	}
	if err := c.checkMarker(); err != nil {
		return errors.Join(err, c.checkDriverRoot(), c.checkVersion(ctx))
	}
	return c.Check(ctx)
}

// Wait blocks until Check passes or ctx ends. It re-checks as soon as the
// marker directory changes and otherwise every poll, because the loaded
// version and the chips are not files it can watch.
func (c Checker) Wait(ctx context.Context, clk clock.Clock, poll time.Duration, log logrus.FieldLogger) error {
	changes, err := marker.Dir{Path: c.Host.Path(c.MarkerDir)}.Changes(ctx)
	if err != nil {
		log.WithError(err).Debug("marker directory not watched; polling")
	}
	last := ""
	for {
		err := c.gate(ctx)
		if err == nil {
			log.Info("NPU driver ready")
			return nil
		}
		if msg := err.Error(); msg != last {
			log.WithError(err).Info("waiting for the NPU driver")
			last = msg
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting for the NPU driver: %w", err)
		case <-changes:
		case <-clk.After(poll):
		}
	}
}
