package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"reflect"
	"time"

	"k8s.io/client-go/kubernetes"
)

// Config is what the plugin needs from its command line and environment.
type Config struct {
	Node       string
	DCMIQuery  string // the dcmi-query helper
	PluginDir  string // /var/lib/kubelet/device-plugins
	DevDir     string // /dev
	Client     kubernetes.Interface
	Log        *log.Logger
	PollPeriod time.Duration // how often the chips' health is read
}

// Run serves until ctx ends: it reads the chips, writes the ConfigMap,
// registers, and then follows the chips' health, re-registering when the
// kubelet restarts (it removes every plugin socket then).
func Run(ctx context.Context, cfg Config) error {
	if cfg.Node == "" {
		return errors.New("env NODE_NAME is empty: the DaemonSet must set it from spec.nodeName")
	}
	chips, err := Query(ctx, cfg.DCMIQuery)
	if err != nil {
		return err
	}
	cfg.Log.Printf("%d chips of type %s on node %s", len(chips), chips[0].DeviceType(), cfg.Node)
	// Held from here until Run returns, as the vendor's plugin holds them
	// through DCMI while it runs.
	held := NewHeld(cfg.DevDir)
	defer func() { _ = held.Close() }()
	if err := held.Hold(chips); err != nil {
		return fmt.Errorf("node %s: %w", cfg.Node, err)
	}
	if err := publish(ctx, cfg, chips); err != nil {
		return err
	}
	s := newServer(chips[0].DeviceType(), cfg.PluginDir, cfg.DevDir, chips)
	g, err := s.serve(ctx)
	if err != nil {
		return err
	}
	defer func() { g.Stop() }()
	cfg.Log.Printf("registered %s%s with the kubelet", resourcePrefix, s.devType)
	tick := time.NewTicker(cfg.PollPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if _, err := os.Stat(s.socket()); err != nil {
			cfg.Log.Printf("plugin socket gone (%v): the kubelet restarted, registering again", err)
			g.Stop()
			if g, err = s.serve(ctx); err != nil {
				return err
			}
		}
		now, err := Query(ctx, cfg.DCMIQuery)
		if err != nil {
			cfg.Log.Printf("%v", err)
			continue
		}
		if reflect.DeepEqual(now, chips) {
			continue
		}
		chips = now
		if err := held.Hold(chips); err != nil {
			cfg.Log.Printf("%v", err)
		}
		for _, c := range chips {
			if !c.Healthy() {
				cfg.Log.Printf("chip %s is unhealthy (health code %d)", c.DeviceName(), c.Health)
			}
		}
		s.setChips(chips)
		if err := publish(ctx, cfg, chips); err != nil {
			cfg.Log.Printf("%v", err)
		}
	}
}

func publish(ctx context.Context, cfg Config, chips []Chip) error {
	cm, err := DeviceInfoConfigMap(cfg.Node, chips, time.Now())
	if err != nil {
		return fmt.Errorf("node %s: device info: %w", cfg.Node, err)
	}
	return WriteDeviceInfo(ctx, cfg.Client, cm)
}
