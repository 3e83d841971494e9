package driverentry

// Running the vendor installer. Upstream's installer refuses to install
// over a loaded driver while any process holds a davinci device node
// (hicann/driver v8.5.0, scripts/package/custom/driver/common/scripts/
// driver_install.sh check_boot_status and exitInstallInfo; common.sh
// setHotResetFlag and checkUserProcess), and warns never to stop it
// half-way: its uninstall removes version.info first. So before an install
// over a loaded driver the driver pod stops everything of ours that opens
// the chips, and waits while anything else does; an install, once
// started, runs to its end or its timeout, whatever happens to the pod.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// Defaults of Config's durations.
const (
	DefaultInstallTimeout = 20 * time.Minute
	DefaultHolderWait     = 2 * time.Minute
)

// bookkeepingTimeout bounds the API calls that record an install that
// finished while the pod was being stopped.
const bookkeepingTimeout = 20 * time.Second

// installFresh installs and loads the desired version on a boot with no
// driver loaded: no device node exists, so nothing can hold one.
func installFresh(ctx context.Context, cfg Config, d Deps, node *corev1.Node) error {
	if err := runInstaller(ctx, cfg, d); err != nil {
		return d.installFailed(ctx, cfg, node, err, notRequested)
	}
	return nil
}

// installOver installs the desired version over the loaded driver (why:
// "upgrade" or "repair"): stop what of ours holds the chips, wait while
// anything else does, install, record it. The reboot loads it.
func installOver(ctx context.Context, cfg Config, d Deps, node *corev1.Node, why string) error {
	log := d.Log.WithFields(logrus.Fields{"node": cfg.NodeName, "desired": cfg.DriverVersion, "for": why})
	stopped, err := quiesce(ctx, cfg, d, node, log)
	if err != nil {
		return err
	}
	holders, err := waitHolders(ctx, cfg, d, stopped)
	if err != nil {
		return fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}
	if len(holders) > 0 {
		names := make([]string, len(holders))
		for i, h := range holders {
			names[i] = h.String()
		}
		return &RetryError{Reason: contract.EventDriverInstallBlocked, Status: "blocked", node: node,
			Msg: fmt.Sprintf("node %s: driver %s is not installed yet: the davinci device nodes are still held after the driver pod stopped the device plugin, exporter and re-roll targets, and the vendor installer refuses to install while they are: %s; stop them (drain the pod, or end the process)",
				cfg.NodeName, cfg.DriverVersion, strings.Join(names, "; "))}
	}
	log.WithField("by", cfg.installer()).Info("nothing holds the chips: installing over the loaded driver")
	if err := runInstaller(ctx, cfg, d); err != nil {
		return d.installFailed(ctx, cfg, node, err, notRebooted)
	}
	// The install is done: record it even if the pod is being stopped,
	// or the rebooter would wait for an install that happened.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	if err := cfg.Markers.SetStaged(cfg.DriverVersion); err != nil {
		return fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}
	node, err = d.Nodes.Patch(bctx, cfg.NodeName, kube.NodeChange{Annotations: map[string]*string{
		cfg.Keys.InstalledDriver(): kube.Set(cfg.DriverVersion),
		cfg.Keys.InstallStatus():   kube.Set(fmt.Sprintf("installed %s at %s; health probes paused and the device plugin held until the reboot loads it", cfg.DriverVersion, d.clock().Now().UTC().Format(time.RFC3339))),
	}})
	if err != nil {
		return err
	}
	log.Info("desired driver installed; the reboot loads it")
	d.Events.Node(node, false, contract.EventDriverActivationPending, "driver %s installed on the drained node; the reboot the rollout asked for loads it", cfg.DriverVersion)
	return nil
}

// quiesce stops everything of ours that opens the chips, in an order that
// lets nothing come back: first the hold (the health-watch pauses) and
// the driver-ready marker away (the replacements of the deleted pods wait
// in their gate), then driver-ready=false on the Node, then the pods.
// It returns the pods it deleted.
func quiesce(ctx context.Context, cfg Config, d Deps, node *corev1.Node, log logrus.FieldLogger) ([]string, error) {
	m := cfg.Markers
	if err := m.SetHold(cfg.DriverVersion); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}
	if err := m.ClearReady(); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}
	if _, err := d.Nodes.Patch(ctx, cfg.NodeName, kube.NodeChange{
		Labels: map[string]*string{cfg.Keys.DriverReady(): kube.Set(contract.False)},
		Annotations: map[string]*string{cfg.Keys.InstallStatus(): kube.Set(fmt.Sprintf("stopping what holds the chips to install %s (health probes paused) since %s",
			cfg.DriverVersion, d.clock().Now().UTC().Format(time.RFC3339)))},
	}); err != nil {
		return nil, err
	}
	if d.Pods == nil {
		return nil, nil
	}
	stopped, missing, err := d.Pods.Stop(ctx, cfg.NodeName)
	if len(missing) > 0 {
		log.WithField("targets", missing).Warn("stop targets not found; skipping them")
	}
	if len(stopped) > 0 {
		log.WithField("pods", stopped).Info("deleted the pods that hold the chips; their replacements wait for the driver after the reboot")
		d.Events.Node(node, false, contract.EventNPUPodsStopped, "node %s: deleted pod(s) %s so that nothing holds the chips while driver %s is installed; their replacements wait for the driver to be ready after the reboot",
			cfg.NodeName, strings.Join(stopped, ", "), cfg.DriverVersion)
	}
	if err != nil {
		return stopped, fmt.Errorf("node %s: stop the pods that hold the chips: %w", cfg.NodeName, err)
	}
	return stopped, nil
}

// waitHolders returns the processes holding a davinci node, after
// waiting up to HolderWait while any of them may be one of the pods just
// stopped (its containers end within its grace period): a holder in a
// stopped pod, or in a container whose pod the node cannot name. Anything
// else (a process outside Kubernetes, another pod) will not let go by
// waiting, and is reported at once. The host's /proc has nothing to
// watch, so it looks once a second.
func waitHolders(ctx context.Context, cfg Config, d Deps, stopped []string) ([]host.Holder, error) {
	clk := d.clock()
	deadline := clk.Now().Add(cfg.holderWait())
	for {
		holders, err := host.DeviceHolders(d.Host.Path)
		if err != nil || !stopping(holders, stopped) || !clk.Now().Before(deadline) {
			return holders, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-clk.After(time.Second):
		}
	}
}

// stopping reports whether any holder may still be on its way out.
func stopping(holders []host.Holder, stopped []string) bool {
	for _, h := range holders {
		if h.ContainerID != "" && h.Pod == "" || slices.Contains(stopped, h.Namespace+"/"+h.Pod) {
			return true
		}
	}
	return false
}

// runInstaller runs the vendor installer to its end or its timeout. Its
// context is not the pod's: SIGTERM must not cut an install short (the
// vendor warns never to interrupt one, and its uninstall has already
// removed version.info). The installed version is marked incomplete
// until it is checked.
func runInstaller(ctx context.Context, cfg Config, d Deps) error {
	if _, err := d.Nodes.Patch(ctx, cfg.NodeName, kube.NodeChange{Annotations: map[string]*string{
		cfg.Keys.InstalledDriver(): kube.Set(contract.InstalledIncomplete),
		cfg.Keys.InstallStatus(): kube.Set(fmt.Sprintf("installing %s since %s (installer timeout %s; health probes paused)",
			cfg.DriverVersion, d.clock().Now().UTC().Format(time.RFC3339), cfg.installTimeout())),
	}}); err != nil {
		return err
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.installTimeout())
	defer cancel()
	stopped := context.AfterFunc(ctx, func() {
		d.Log.WithField("node", cfg.NodeName).Warn("the driver pod is being stopped: the running install finishes first (within driver.installTimeoutSeconds), then the pod exits")
	})
	defer stopped()
	err := install(ictx, cfg, d)
	if errors.Is(ictx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s did not finish within %s (driver.installTimeoutSeconds) and was stopped; the tree it left is repaired by the next try: %w",
			cfg.installer(), cfg.installTimeout(), err)
	}
	return err
}

// install runs the vendor installer and checks that the driver tree it
// left is the desired version: version.info, which the host reports for a
// loaded driver (the one just loaded on a fresh boot, or the old modules
// still loaded after an install over them).
func install(ctx context.Context, cfg Config, d Deps) error {
	if cfg.tree() {
		if err := installTree(ctx, cfg, d); err != nil {
			return err
		}
	} else if err := d.Host.InstallDriver(ctx, cfg.DriverVersion, cfg.InstallCommand); err != nil {
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
			d.Log.WithError(err).Warn("driver root has no lib64 after the install; CDI generation and the device plugin will not find the driver libraries (check driver.hostDriverPath)")
		}
	}
	return nil
}

// installFailed reports err on the node: driver-ready=false, which holds
// a rollout's validation (the node stays cordoned with the error) and
// tells the scheduler-facing parts the driver is not there. It does not
// touch reboot-required. The Event is emitted by the retry, which knows
// when the next try is.
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
		if why := installerRefusal(cfg.DriverVersion, ee.Output, ee.Stderr); why != "" {
			fix = "; " + why
		}
	}
	msg := fmt.Sprintf("node %s: driver %s was not installed: %v%s%s (%s)", cfg.NodeName, cfg.DriverVersion, err, last, fix, then)
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	if _, perr := d.Nodes.Patch(bctx, cfg.NodeName, kube.NodeChange{Labels: map[string]*string{cfg.Keys.DriverReady(): kube.Set(contract.False)}}); perr != nil {
		d.Log.WithError(perr).Warn("could not set driver-ready=false after the failed install")
	}
	return &RetryError{Reason: contract.EventDriverInstallFailed, Status: "failed", Msg: msg, Err: err, node: node}
}

// lastLine is what an installer's output says last about its failure:
// its last [ERROR] line, else its last non-empty line, from the first
// output that has one, without terminal colour codes (upstream's
// drvColorEcho prints its errors in red, and then an [INFO] hint).
func lastLine(outs ...[]byte) string {
	for _, o := range outs {
		lines := strings.Split(ansi.ReplaceAllString(strings.TrimSpace(string(o)), ""), "\n")
		last := ""
		for _, l := range lines {
			if l = strings.TrimSpace(l); l == "" {
				continue
			}
			if strings.Contains(l, "ERROR") {
				last = l
			}
		}
		if last == "" {
			last = strings.TrimSpace(lines[len(lines)-1])
		}
		if last != "" {
			return last
		}
	}
	return ""
}

// ansi matches a terminal's colour sequences.
var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)
