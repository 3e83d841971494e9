// Package driverentry is the driver pod's entry gate (docs/architecture.md,
// "Driver rollout"): it
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
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/drivertree"
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
	NodeName string
	// Namespace is the driver pod's, named in the retry command.
	Namespace     string
	Keys          contract.Keys
	DriverVersion string
	// DriverRoot is the host driver tree (as this process reaches it),
	// checked after an install.
	DriverRoot string
	// HostDriverRoot is the same tree as a host path, judged for a
	// half-finished install; empty means host.DefaultDriverRoot.
	HostDriverRoot string
	Markers        marker.Dir
	// Mode is the profile's install mode (drivertree.ModeRun or
	// ModeTree); empty is ModeRun.
	Mode string
	// InstallCommand is the vendor installer (run mode).
	InstallCommand []string
	// ImageTree is the driver tree in the driver image (tree mode);
	// empty is drivertree.DefaultImageTree.
	ImageTree string
	// InstallTimeout bounds one run of the installer; a hung one is
	// stopped and reported. Zero means DefaultInstallTimeout.
	InstallTimeout time.Duration
	// Retry spaces the retries of a blocked or failed install.
	Retry Backoff
	// HolderWait is how long the pods stopped before an install get to
	// let go of the chips before the install counts as blocked. Zero
	// means DefaultHolderWait.
	HolderWait time.Duration
}

// Validate rejects a configuration the gate cannot act on.
func (c Config) Validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("--node-name is empty: set it from the downward API (spec.nodeName)")
	case c.DriverVersion == "":
		return errors.New("--driver-version is empty: set driver.version in the chart values")
	case c.Mode != "" && c.Mode != drivertree.ModeRun && c.Mode != drivertree.ModeTree:
		return fmt.Errorf("--install-mode %q: want %q or %q (driver.profiles[].installMode)", c.Mode, drivertree.ModeRun, drivertree.ModeTree)
	case !c.tree() && len(c.InstallCommand) == 0:
		return errors.New("no vendor install command after --: set driver.installCommand in the chart values")
	case c.InstallTimeout < 0:
		return fmt.Errorf("--install-timeout %s must not be negative", c.InstallTimeout)
	case c.HolderWait < 0:
		return fmt.Errorf("--holder-wait %s must not be negative", c.HolderWait)
	}
	return c.Retry.Validate()
}

// tree is tree mode: the driver comes as an installed tree from the image.
func (c Config) tree() bool { return c.Mode == drivertree.ModeTree }

func (c Config) imageTree() string {
	if c.ImageTree == "" {
		return drivertree.DefaultImageTree
	}
	return c.ImageTree
}

// installer names what installs the driver, for messages.
func (c Config) installer() string {
	if c.tree() {
		return "the copy of the driver tree " + c.imageTree()
	}
	return "the installer " + c.InstallCommand[0]
}

func (c Config) installTimeout() time.Duration {
	if c.InstallTimeout == 0 {
		return DefaultInstallTimeout
	}
	return c.InstallTimeout
}

func (c Config) holderWait() time.Duration {
	if c.HolderWait == 0 {
		return DefaultHolderWait
	}
	return c.HolderWait
}

func (c Config) hostDriverRoot() string {
	if c.HostDriverRoot == "" {
		return host.DefaultDriverRoot
	}
	return c.HostDriverRoot
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
	// Pods stops the pods of ours that hold the chips before an install
	// over a loaded driver; nil stops none.
	Pods PodStopper
	// Clock paces retries and the wait for holders; nil is the real one.
	Clock clock.WithTicker
	Log   logrus.FieldLogger
}

func (d Deps) clock() clock.WithTicker {
	if d.Clock == nil {
		return clock.RealClock{}
	}
	return d.Clock
}

// Prepare brings the node to a usable driver and records it: install on a
// fresh boot, repair a half-finished install, marker and node label in
// every case. It holds the host's install lock, so it judges the tree only
// once another driver pod's install (a replaced pod in its grace period)
// has finished. It returns the plan it carried out; a failed or blocked
// install is a *RetryError, which Run retries.
func Prepare(ctx context.Context, cfg Config, d Deps) (Plan, error) {
	if err := cfg.Validate(); err != nil {
		return Plan{}, err
	}
	log := d.Log.WithFields(logrus.Fields{"node": cfg.NodeName, "desired": cfg.DriverVersion})
	unlock, err := host.LockInstall(ctx, d.Host.Path, d.clock(), func(why error) { log.WithError(why).Info("waiting for the install lock") })
	if err != nil {
		return Plan{}, fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}
	defer unlock()
	state, err := host.ReadInstallState(d.Host.Path, cfg.hostDriverRoot())
	if err != nil {
		return Plan{}, fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}
	node, err := d.Nodes.Get(ctx, cfg.NodeName)
	if err != nil {
		return Plan{}, err
	}
	if cfg.tree() && !state.Half {
		if err := loadInstalled(ctx, cfg, d, node, log); err != nil {
			return Plan{}, err
		}
	}
	loaded, err := loadedThisBoot(ctx, cfg, d, state)
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
	if state.Half {
		// Before anything else: npu-smi, the device plugin and the next
		// boot would meet a partial package.
		log.WithField("why", state.Why).Warn("half-installed driver found: installing the desired version again")
		d.Events.Node(node, true, contract.EventDriverInstallRepair, "node %s: the driver is half-installed (%s): installing driver %s again before anything else; the node is not counted as upgraded until it is loaded", cfg.NodeName, state.Why, cfg.DriverVersion)
		if !plan.Install {
			if err := installOver(ctx, cfg, d, node, "repair"); err != nil {
				return plan, err
			}
			plan.Installed = cfg.DriverVersion
		}
	}
	if plan.Install {
		log.WithField("by", cfg.installer()).Info("no driver loaded: installing")
		if err := installFresh(ctx, cfg, d, node); err != nil {
			return plan, err
		}
		if err := cfg.Markers.SetLoaded(plan.Loaded); err != nil {
			return plan, fmt.Errorf("node %s: %w", cfg.NodeName, err)
		}
	}
	if err := recordChips(ctx, cfg, d, plan.Install, log); err != nil {
		log.WithError(err).Warn("chip count at driver load not recorded; the health-watch checks chip health only")
	}
	held, err := markReady(cfg, plan, log)
	if err != nil {
		return plan, err
	}
	change := kube.NodeChange{
		Labels:      map[string]*string{cfg.Keys.DriverVersion(): kube.Set(plan.Loaded)},
		Annotations: map[string]*string{cfg.Keys.InstalledDriver(): kube.Set(plan.Installed)},
	}
	if !held {
		change.Annotations[cfg.Keys.InstallStatus()] = nil
	}
	node, err = d.Nodes.Patch(ctx, cfg.NodeName, change)
	if err != nil {
		return plan, err
	}
	announce(d, node, plan, log)
	return plan, nil
}

// markReady writes the driver-ready marker unless something keeps it
// away, and reports whether the chips stay held for an install. A wedge of
// this boot belongs to the health-watch. An install hold of this boot
// stays until the reboot once anything was (or is still to be) installed
// over the loaded driver: nothing of ours may open the chips again before
// it. A hold with nothing left to install (a rollback before the install)
// is released.
func markReady(cfg Config, plan Plan, log logrus.FieldLogger) (bool, error) {
	m := cfg.Markers
	wedged, err := m.Wedged()
	if err != nil {
		return false, err
	}
	version, held, err := m.Hold()
	if err != nil {
		return false, err
	}
	if held && (plan.NeedsInstall() || plan.Installed != plan.Loaded) {
		log.WithField("hold", version).Info("the chips stay held for the driver install until the reboot; driver-ready marker not written")
		return true, nil
	}
	if held {
		log.WithField("hold", version).Info("nothing left to install over the loaded driver: releasing the chips, health probes resume")
		if err := m.ClearHold(); err != nil {
			return false, fmt.Errorf("node %s: %w", cfg.NodeName, err)
		}
	}
	if wedged {
		// The health-watch took the marker away in this boot and restores
		// it itself if the chips recover; writing it here would advertise
		// wedged chips as ready.
		log.Warn("chips are marked wedged in this boot; leaving the driver-ready marker to the health-watch")
		return false, nil
	}
	if err := m.SetReady(plan.Loaded); err != nil {
		return false, fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}
	return false, nil
}

// announce logs the plan and emits its Event.
func announce(d Deps, node *corev1.Node, plan Plan, log logrus.FieldLogger) {
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
}

// Run prepares the driver, installs a pending version when the node's
// reboot comes, then idles until ctx ends: the driver container must keep
// running for the pod to stay Ready. A blocked or failed install is
// retried with backoff (Config.Retry); nothing reboots for it. SIGTERM
// (ctx ending) never cuts an installer short: the running install and its
// bookkeeping finish first, within the installer's timeout, which the
// chart keeps below the pod's grace period.
func Run(ctx context.Context, cfg Config, d Deps) error {
	var plan Plan
	err := retry(ctx, cfg, d, func() error {
		var err error
		plan, err = Prepare(ctx, cfg, d)
		return err
	})
	if err == nil && plan.NeedsInstall() {
		err = stage(ctx, cfg, d)
	}
	if err != nil && ctx.Err() == nil {
		return err
	}
	<-ctx.Done()
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
