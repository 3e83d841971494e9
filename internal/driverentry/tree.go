package driverentry

// Tree mode (drivertree.ModeTree, read-only roots such as KubeOS): the
// driver image carries an installed driver tree, not the vendor's .run.
// The driver pod copies it into the writable driver path and, at every
// boot, loads the modules of the tree installed there before anything
// else starts: the version on disk, never the desired one, so a reboot
// outside the rollout (a recovery) does not upgrade the node behind the
// rollout's back. A new version is installed as on other nodes: on the
// drained node, with nothing holding the chips, and loaded by the reboot.

import (
	"context"
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
)

func treeHost(d Deps) (host.TreeHost, error) {
	th, ok := d.Host.(host.TreeHost)
	if !ok {
		return nil, fmt.Errorf("install mode tree: this host (%T) cannot take a driver tree", d.Host)
	}
	return th, nil
}

// loadInstalled loads the installed tree on a boot where no driver is
// loaded yet. With no tree installed it does nothing: the fresh install
// copies and loads one.
func loadInstalled(ctx context.Context, cfg Config, d Deps, node *corev1.Node, log logrus.FieldLogger) error {
	if _, ok, err := cfg.Markers.Loaded(); err != nil || ok {
		return err
	}
	if v, err := d.Host.LoadedDriver(ctx); err != nil || v != "" {
		return err
	}
	th, err := treeHost(d)
	if err != nil {
		return err
	}
	installed, whole, err := th.InstalledTree()
	if err != nil || installed == "" {
		return err
	}
	if !whole {
		// Left by a .run install or cut short: nothing to load; the fresh
		// install that follows replaces it with the desired version.
		log.WithField("installed", installed).Warn("the driver tree on disk is not a whole tree-mode tree: installing the desired version over it")
		d.Events.Node(node, true, contract.EventDriverInstallRepair, "node %s: the driver tree in %s (version %s) lacks what tree mode loads (script/specific_func.inc, host/*.ko, tools/npu-smi): installing driver %s over it",
			cfg.NodeName, cfg.hostDriverRoot(), installed, cfg.DriverVersion)
		return nil
	}
	log.WithField("installed", installed).Info("no driver loaded: loading the driver tree installed on this node")
	if err := loadTree(ctx, cfg, d, th, log); err != nil {
		return d.installFailed(ctx, cfg, node, fmt.Errorf("load driver %s installed in %s: %w", installed, cfg.hostDriverRoot(), err), notRequested)
	}
	d.Events.Node(node, false, contract.EventDriverLoaded, "driver %s loaded from the tree installed in %s", installed, cfg.hostDriverRoot())
	return nil
}

// installTree copies the image's tree into place and, when no driver is
// loaded (a fresh boot), loads it.
func installTree(ctx context.Context, cfg Config, d Deps) error {
	th, err := treeHost(d)
	if err != nil {
		return err
	}
	if err := th.InstallTree(ctx, cfg.DriverVersion, cfg.imageTree()); err != nil {
		return fmt.Errorf("install the driver tree %s of the image: %w", cfg.imageTree(), err)
	}
	// Modules of this boot already loaded (an install over them): the
	// reboot loads the new tree.
	if loaded, err := d.Host.LoadedDriver(ctx); err != nil || loaded != "" {
		return err
	}
	return loadTree(ctx, cfg, d, th, d.Log.WithField("node", cfg.NodeName))
}

// loadTree loads the tree's modules and logs what it did.
func loadTree(ctx context.Context, cfg Config, d Deps, th host.TreeHost, log logrus.FieldLogger) error {
	loaded, skipped, err := th.LoadTree(ctx)
	if len(skipped) > 0 {
		log.WithField("skipped", strings.Join(skipped, "; ")).Warn("optional driver modules not loaded (upstream's loader lets them fail too)")
	}
	if err != nil {
		return err
	}
	log.WithField("modules", strings.Join(loaded, " ")).Info("driver modules loaded")
	return nil
}
