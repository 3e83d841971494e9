// Package driverentry is the driver pod's entry gate (DESIGN.md §4): it
// wraps the vendor install command and never unloads a running driver,
// because Ascend chips do not survive rmmod. On a fresh boot it installs
// the desired version. With another version loaded it records that one,
// idles Ready, and installs the desired version only once the rollout has
// drained the node and asks for its reboot (reboot-required): the vendor
// installer, run over a loaded driver, uninstalls it first and may hot
// reset the chips, so it must not run under workloads, and the modules it
// leaves under /lib/modules are what the next boot loads. A version bump
// therefore replaces every driver pod at once without touching the chips.
package driverentry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/marker"
	"github.com/openfuyao/npu-stack/internal/npusmi"
)

// Plan is what the gate does given the loaded and desired versions.
type Plan struct {
	// Install: no driver is loaded (fresh boot), install the desired one.
	Install bool
	// Desired is the version the pod was configured with.
	Desired string
	// Loaded is the version that is (or, after Install, will be) in the
	// kernel: what the node label and the marker record.
	Loaded string
	// Pending is set when Desired differs from an already loaded version:
	// only a reboot activates it.
	Pending bool
	// Installed is the version on disk, the one the next boot loads: the
	// loaded one unless another was installed over it in this boot.
	Installed string
}

// NeedsInstall is true when the disk does not hold the desired version
// although a driver is loaded: a new version (Pending), or the loaded one
// again after another was installed over it in this boot (a rollback
// before the reboot). It is installed on the drained node (StageNow).
func (p Plan) NeedsInstall() bool { return !p.Install && p.Installed != p.Desired }

// Decide is the gate's whole policy.
func Decide(loaded, desired string) Plan {
	switch loaded {
	case "":
		return Plan{Install: true, Desired: desired, Loaded: desired}
	case desired:
		return Plan{Desired: desired, Loaded: loaded}
	default:
		return Plan{Desired: desired, Loaded: loaded, Pending: true}
	}
}

// Config is what the gate is told.
type Config struct {
	NodeName      string
	Keys          contract.Keys
	DriverVersion string
	// DriverRoot is the host driver tree (as this process reaches it),
	// checked after an install.
	DriverRoot     string
	Markers        marker.Dir
	InstallCommand []string
}

// Validate rejects a configuration the gate cannot act on.
func (c Config) Validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("--node-name is empty: set it from the downward API (spec.nodeName)")
	case c.DriverVersion == "":
		return errors.New("--driver-version is empty: set driver.version in the chart values")
	case len(c.InstallCommand) == 0:
		return errors.New("no vendor install command after --: set driver.installCommand in the chart values")
	}
	return nil
}

// EventRecorder emits Events on Nodes (kube.Recorder in the binary).
type EventRecorder interface {
	Node(node *corev1.Node, warning bool, reason contract.EventReason, format string, args ...any)
}

// Deps are the gate's collaborators.
type Deps struct {
	Nodes kube.NodeClient
	// Watch waits for the node's reboot before a pending install.
	Watch  kube.NodeWaiter
	Host   host.Host
	Events EventRecorder
	Log    logrus.FieldLogger
}

// Prepare brings the node to a usable driver and records it: install on a
// fresh boot, marker and node label in every case. It returns the plan it
// carried out.
func Prepare(ctx context.Context, cfg Config, d Deps) (Plan, error) {
	if err := cfg.Validate(); err != nil {
		return Plan{}, err
	}
	log := d.Log.WithFields(logrus.Fields{"node": cfg.NodeName, "desired": cfg.DriverVersion})
	loaded, err := loadedThisBoot(ctx, cfg, d)
	if err != nil {
		return Plan{}, fmt.Errorf("node %s: read the loaded driver version: %w", cfg.NodeName, err)
	}
	plan := Decide(loaded, cfg.DriverVersion)
	plan.Installed = plan.Loaded
	if staged, ok, err := cfg.Markers.Staged(); err != nil {
		return plan, fmt.Errorf("node %s: %w", cfg.NodeName, err)
	} else if ok && !plan.Install {
		plan.Installed = staged
	}
	node, err := d.Nodes.Get(ctx, cfg.NodeName)
	if err != nil {
		return plan, err
	}
	if plan.Install {
		log.WithField("command", strings.Join(cfg.InstallCommand, " ")).Info("no driver loaded: installing")
		if err := install(ctx, cfg, d, log); err != nil {
			return plan, d.installFailed(ctx, cfg, node, err, notRequested)
		}
		if err := cfg.Markers.SetLoaded(plan.Loaded); err != nil {
			return plan, fmt.Errorf("node %s: %w", cfg.NodeName, err)
		}
	}
	if err := recordChips(ctx, cfg, d, plan.Install, log); err != nil {
		log.WithError(err).Warn("chip count at driver load not recorded; the health-watch checks chip health only")
	}
	wedged, err := cfg.Markers.Wedged()
	if err != nil {
		return plan, err
	}
	if wedged {
		// The health-watch took the marker away in this boot and restores
		// it itself if the chips recover; writing it here would advertise
		// wedged chips as ready.
		log.Warn("chips are marked wedged in this boot; leaving the driver-ready marker to the health-watch")
	} else if err := cfg.Markers.SetReady(plan.Loaded); err != nil {
		return plan, fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}
	node, err = d.Nodes.Patch(ctx, cfg.NodeName, kube.NodeChange{
		Labels:      map[string]*string{cfg.Keys.DriverVersion(): kube.Set(plan.Loaded)},
		Annotations: map[string]*string{cfg.Keys.InstalledDriver(): kube.Set(plan.Installed)},
	})
	if err != nil {
		return plan, err
	}
	switch {
	case plan.Install:
		log.Info("driver installed and loaded")
		d.Events.Node(node, false, contract.EventDriverLoaded, "driver %s installed and loaded on a fresh boot", plan.Loaded)
	case plan.Pending && !plan.NeedsInstall():
		log.WithField("loaded", plan.Loaded).Info("desired driver already installed over the loaded one in this boot; the next reboot loads it")
	case plan.NeedsInstall() && !plan.Pending:
		log.WithField("installed", plan.Installed).Warn("the desired driver is loaded but another version was installed over it in this boot; it is installed again once the rollout has drained this node and asks for its reboot")
		d.Events.Node(node, false, contract.EventDriverActivationPending,
			"driver %s is loaded but %s is installed on disk; %s is installed again once the rollout has drained the node and asks for its reboot", plan.Loaded, plan.Installed, plan.Desired)
	case plan.Pending:
		log.WithField("loaded", plan.Loaded).Warn("another driver version is loaded; it stays loaded (chips do not survive unloading) until the rollout drains this node and asks for its reboot, when the desired one is installed")
		d.Events.Node(node, false, contract.EventDriverActivationPending,
			"driver %s stays loaded (chips cannot survive unloading it); driver %s is installed once the rollout has drained the node and asks for its reboot, which loads it", plan.Loaded, plan.Desired)
	default:
		log.Info("desired driver already loaded")
	}
	return plan, nil
}

// Run prepares the driver, installs a pending version when the node's
// reboot comes, then idles until ctx ends: the driver container must keep
// running for the pod to stay Ready. A failed install idles too:
// restarting would run a failing installer again and again on the host;
// the error is on the node and in the log, and nothing reboots for it.
func Run(ctx context.Context, cfg Config, d Deps) error {
	plan, err := Prepare(ctx, cfg, d)
	if err == nil && plan.NeedsInstall() {
		err = stage(ctx, cfg, d)
	}
	var failed *InstallError
	if errors.As(err, &failed) {
		d.Log.WithError(err).Error("driver install failed; this pod installs nothing more until it is replaced")
		<-ctx.Done()
		return nil
	}
	if err != nil && ctx.Err() == nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// InstallError is a driver install that failed: reported on the node,
// never retried by this pod, never answered with a reboot.
type InstallError struct {
	Msg string
	Err error
}

func (e *InstallError) Error() string { return e.Msg }
func (e *InstallError) Unwrap() error { return e.Err }

// installFailed reports err on the node: a DriverInstallFailed warning
// with the fix and driver-ready=false, which holds a rollout's validation
// (the node stays cordoned with the error) and tells the scheduler-facing
// parts the driver is not there. It does not touch reboot-required.
func (d Deps) installFailed(ctx context.Context, cfg Config, node *corev1.Node, err error, then string) error {
	fix := "; fix: see the installer output in this pod's log (container driver), fix the driver image or driver.installCommand"
	if _, ok := host.IsProblem(err); ok {
		fix = "" // its message carries its fix
	}
	last := ""
	if ee, ok := host.IsExitError(err); ok {
		if l := lastLine(ee.Stderr, ee.Output); l != "" {
			last = fmt.Sprintf(" (installer's last words: %q)", l)
		}
	}
	msg := fmt.Sprintf("node %s: driver %s was not installed: %v%s%s; then delete the driver pod on node %s to install again (%s)",
		cfg.NodeName, cfg.DriverVersion, err, last, fix, cfg.NodeName, then)
	d.Events.Node(node, true, contract.EventDriverInstallFailed, "%s", msg)
	if _, perr := d.Nodes.Patch(ctx, cfg.NodeName, kube.NodeChange{Labels: map[string]*string{cfg.Keys.DriverReady(): kube.Set(contract.False)}}); perr != nil {
		d.Log.WithError(perr).Warn("could not set driver-ready=false after the failed install")
	}
	return &InstallError{Msg: msg, Err: err}
}

// lastLine is the last non-empty line of the first output that has one.
func lastLine(outs ...[]byte) string {
	for _, o := range outs {
		lines := strings.Split(strings.TrimSpace(string(o)), "\n")
		if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
			return l
		}
	}
	return ""
}

// install runs the vendor installer and checks that the driver tree it
// left is the desired version: version.info, which the host reports for a
// loaded driver (the one just loaded on a fresh boot, or the old modules
// still loaded after an install over them).
func install(ctx context.Context, cfg Config, d Deps, log logrus.FieldLogger) error {
	if err := d.Host.InstallDriver(ctx, cfg.DriverVersion, cfg.InstallCommand); err != nil {
		return fmt.Errorf("install with %q: %w", strings.Join(cfg.InstallCommand, " "), err)
	}
	now, err := d.Host.LoadedDriver(ctx)
	if err != nil {
		return fmt.Errorf("read the driver version after the install: %w", err)
	}
	if now != cfg.DriverVersion {
		return fmt.Errorf("the installer succeeded but the driver tree reports version %q (version.info); check that the driver image matches driver.version", now)
	}
	if cfg.DriverRoot != "" {
		if _, err := os.Stat(filepath.Join(cfg.DriverRoot, "lib64")); err != nil {
			log.WithError(err).Warn("driver root has no lib64 after the install; CDI generation and the device plugin will not find the driver libraries (check driver.hostDriverPath)")
		}
	}
	return nil
}

// recordChips remembers how many chips the driver brought up, the count
// the health-watch later insists on. It is per boot: only a fresh load (or
// the first run in a boot) sets it.
func recordChips(ctx context.Context, cfg Config, d Deps, fresh bool, log logrus.FieldLogger) error {
	if _, ok, err := cfg.Markers.ChipsAtLoad(); err == nil && ok && !fresh {
		return nil
	}
	out, err := d.Host.NPUSMI(ctx, "info")
	if err != nil {
		return fmt.Errorf("npu-smi info: %w", err)
	}
	info, err := npusmi.Parse(out)
	if err != nil {
		return err
	}
	log.WithField("chips", len(info.Chips)).Info("chips visible after driver load")
	return cfg.Markers.SetChipsAtLoad(len(info.Chips))
}
