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
// for its reboot; the rebooter waits for it (installed-driver-version),
// and the reboot loads the modules it left.

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

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
// rewrites version.info while the old modules stay loaded.
func loadedThisBoot(ctx context.Context, cfg Config, d Deps) (string, error) {
	v, ok, err := cfg.Markers.Loaded()
	if err != nil || ok {
		return v, err
	}
	v, err = d.Host.LoadedDriver(ctx)
	if err != nil || v == "" {
		return v, err
	}
	return v, cfg.Markers.SetLoaded(v)
}

// stage waits for the node's reboot request and installs the desired
// version over the loaded one.
func stage(ctx context.Context, cfg Config, d Deps) error {
	log := d.Log.WithField("node", cfg.NodeName).WithField("desired", cfg.DriverVersion)
	if d.Watch == nil {
		return fmt.Errorf("node %s: no node watch to wait for the reboot before installing driver %s", cfg.NodeName, cfg.DriverVersion)
	}
	node, err := d.Watch.Until(ctx, cfg.NodeName, func(n *corev1.Node) bool { return StageNow(n, cfg.Keys) })
	if err != nil {
		return err
	}
	log.WithField("command", strings.Join(cfg.InstallCommand, " ")).Info("the rollout drained this node for its reboot: installing the desired driver over the loaded one; the reboot loads it")
	if err := install(ctx, cfg, d, log); err != nil {
		return d.installFailed(ctx, cfg, node, err, notRebooted)
	}
	if err := cfg.Markers.SetStaged(cfg.DriverVersion); err != nil {
		return fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}
	node, err = d.Nodes.Patch(ctx, cfg.NodeName, kube.NodeChange{Annotations: map[string]*string{cfg.Keys.InstalledDriver(): kube.Set(cfg.DriverVersion)}})
	if err != nil {
		return err
	}
	log.Info("desired driver installed; the reboot loads it")
	d.Events.Node(node, false, contract.EventDriverActivationPending, "driver %s installed on the drained node; the reboot the rollout asked for loads it", cfg.DriverVersion)
	return nil
}
