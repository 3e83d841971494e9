package driverentry

// Installing a new driver version over a loaded one. The vendor installer
// run over an installed driver is an overwrite install: it uninstalls the
// old package first, which it refuses while containers use the davinci
// devices unless forced, may hot reset the chips, and otherwise ends with
// "Reboot needed for installation/upgrade to take effect" (hicann/driver
// v8.5.0, scripts/package/custom/driver/common/scripts/driver_install.sh:
// the overwrite branch runs uninstallRun then installRun;
// check_boot_status, setHotResetFlag, installationCompletionMessage). So
// it runs only on a node the rollout has drained, once the rollout asks
// for its reboot, after the driver pod stopped what of ours holds the
// chips (install.go); the rebooter waits for it
// (installed-driver-version), and the reboot loads the modules it left.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
)

// UnknownVersion is the loaded version recorded when a driver is loaded
// but its half-installed tree no longer says which: the node then counts
// as out of date, and the rollout's reboot loads the repaired install.
const UnknownVersion = "unknown"

// What a failed install tells the user about reboots.
const (
	notRequested = "no reboot is requested; the pod stays not Ready"
	notRebooted  = "the rebooter does not reboot the node until the driver is installed; the node stays cordoned"
)

// StageNow is true once the node is ready for the install of a pending
// version: the rollout drained it and asks for its reboot.
func StageNow(n *corev1.Node, k contract.Keys) bool {
	return n.Labels[k.UpgradeState()] == string(contract.StateRebootRequired) && n.Labels[k.RebootRequired()] == contract.True
}

// loadedThisBoot is the driver version loaded in this boot. It is read
// from the host once per boot and recorded in the marker directory (/run,
// emptied by every reboot), because an install over the loaded driver
// rewrites version.info while the old modules stay loaded. Modules loaded
// under a half-installed tree are UnknownVersion.
func loadedThisBoot(ctx context.Context, cfg Config, d Deps, state host.InstallState) (string, error) {
	v, ok, err := cfg.Markers.Loaded()
	if err != nil || ok {
		return v, err
	}
	v, err = d.Host.LoadedDriver(ctx)
	if _, problem := host.IsProblem(err); problem && state.Half {
		v, err = UnknownVersion, nil
	}
	if err != nil || v == "" {
		return v, err
	}
	return v, cfg.Markers.SetLoaded(v)
}

// stage waits for the node's reboot request and installs the desired
// version over the loaded one, retrying a blocked or failed install.
func stage(ctx context.Context, cfg Config, d Deps) error {
	log := d.Log.WithField("node", cfg.NodeName).WithField("desired", cfg.DriverVersion)
	if d.Watch == nil {
		return fmt.Errorf("node %s: no node watch to wait for the reboot before installing driver %s", cfg.NodeName, cfg.DriverVersion)
	}
	node, err := d.Watch.Until(ctx, cfg.NodeName, func(n *corev1.Node) bool { return StageNow(n, cfg.Keys) })
	if err != nil {
		return err
	}
	log.WithField("by", cfg.installer()).Info("the rollout drained this node for its reboot: installing the desired driver over the loaded one; the reboot loads it")
	return retry(ctx, cfg, d, func() error {
		// A retry waits again for the rollout's request: a node that
		// left reboot-required meanwhile (its upgrade failed, was paused or
		// rolled back) must not have its device plugin stopped again.
		node, err = d.Watch.Until(ctx, cfg.NodeName, func(n *corev1.Node) bool { return StageNow(n, cfg.Keys) })
		if err != nil {
			return err
		}
		unlock, err := host.LockInstall(ctx, d.Host.Path, d.clock(), func(why error) { log.WithError(why).Info("waiting for the install lock") })
		if err != nil {
			return fmt.Errorf("node %s: %w", cfg.NodeName, err)
		}
		defer unlock()
		// Another driver pod may have installed it while this one waited
		// for the lock.
		if staged, ok, err := cfg.Markers.Staged(); err != nil || ok && staged == cfg.DriverVersion {
			return err
		}
		return installOver(ctx, cfg, d, node, "upgrade")
	})
}
