// One control-plane component at a time: stopped and started again (the
// outage tests), and the processes each runs.

package testbed

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// PIDs are the process IDs of the running components.
func (c *ControlPlane) PIDs() []int { return slices.Collect(maps.Values(c.Components())) }

// Components are the running components' process IDs by binary name
// (etcd, kube-apiserver, ..., kwok).
func (c *ControlPlane) Components() map[string]int {
	out := make(map[string]int, len(c.comps))
	for _, comp := range c.comps {
		out[comp.name] = comp.cmd.Process.Pid
	}
	return out
}

// StopComponent stops one component (etcd, kube-apiserver,
// kube-controller-manager, ...) as an outage would; StartComponent brings
// it back with the same arguments, port and data.
func (c *ControlPlane) StopComponent(name string) error {
	comp, err := c.component(name)
	if err != nil {
		return err
	}
	return comp.stop(15 * time.Second)
}

// StartComponent restarts a component stopped by StopComponent and waits
// until it serves again (etcd and kube-apiserver; the controllers have no
// endpoint to ask and resume by themselves).
func (c *ControlPlane) StartComponent(ctx context.Context, name string) error {
	old, err := c.component(name)
	if err != nil {
		return err
	}
	select {
	case <-old.done:
	default:
		return fmt.Errorf("start %s: it is still running", name)
	}
	comp, err := startComponent(old.name, old.bin, old.args, old.logDir)
	if err != nil {
		return err
	}
	for i, cc := range c.comps {
		if cc == old {
			c.comps[i] = comp
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	switch name {
	case "etcd":
		for _, a := range old.args {
			if u, ok := strings.CutPrefix(a, "--listen-client-urls="); ok {
				return c.waitHTTP(ctx, "etcd", u+"/health", http.DefaultClient)
			}
		}
	case "kube-apiserver":
		client, err := kubernetes.NewForConfig(c.Config())
		if err != nil {
			return err
		}
		return c.waitAPIServer(ctx, client)
	}
	return nil
}

func (c *ControlPlane) component(name string) (*component, error) {
	for _, comp := range c.comps {
		if comp.name == name {
			return comp, nil
		}
	}
	return nil, fmt.Errorf("no control-plane component %q", name)
}
