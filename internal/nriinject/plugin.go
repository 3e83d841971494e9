package nriinject

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/marker"
)

// PluginName is the name the injector registers with the runtime's NRI.
const PluginName = "npu-stack-inject"

// pluginIndex orders NRI plugins (two digits, lower runs first); the
// injector has no reason to run before others.
const pluginIndex = "50"

// InjectedMessage starts the log line of every injection, the line
// observability.md names.
const InjectedMessage = "injected NPU driver user space"

// Plugin answers containerd's CreateContainer requests. Paths are host
// paths; HostPath maps one to where this process reaches it.
type Plugin struct {
	Node          string
	SpecFile      string // host path of the node's CDI spec
	MarkerDir     string // host path of the marker directory
	RequireMarker bool
	Own           Own
	HostPath      func(string) string
	Log           logrus.FieldLogger
	// RetryPeriod: how often to look again for a runtime without NRI
	// (RetryPeriod when zero).
	RetryPeriod time.Duration
}

// CreateContainer injects the allocated chips' driver user space, or
// refuses the container while the node's driver cannot give it one.
func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	c := containerOf(pod, ctr)
	if len(allocated(c.Devices)) == 0 {
		return nil, nil, nil
	}
	d, err := p.driver()
	if err != nil {
		return nil, nil, err
	}
	plan, err := Decide(c, d, p.Own)
	if err != nil {
		p.Log.WithError(err).WithField("container", c.String()).Warn("refused a container allocated NPU chips")
		return nil, nil, err
	}
	if plan == nil {
		return nil, nil, nil
	}
	adj, err := Adjust(plan, p.HostPath)
	if err != nil {
		err = fmt.Errorf("node %s: container %s: %w; check the CDI spec %s against the host (delete the device-plugin pod to regenerate it)", p.Node, c, err, p.SpecFile)
		p.Log.WithError(err).Warn("refused a container allocated NPU chips")
		return nil, nil, err
	}
	p.Log.WithFields(logrus.Fields{
		"container": c.String(), "chips": joinInts(plan.Chips), "driverVersion": d.ReadyVersion,
		"mounts": len(adj.GetMounts()), "skippedMounts": strings.Join(plan.Skipped, ","),
	}).Info(InjectedMessage)
	return adj, nil, nil
}

func containerOf(pod *api.PodSandbox, ctr *api.Container) Container {
	c := Container{
		PodNamespace: pod.GetNamespace(), PodName: pod.GetName(), PodLabels: pod.GetLabels(),
		Name: ctr.GetName(), Env: ctr.GetEnv(),
	}
	for _, d := range ctr.GetLinux().GetDevices() {
		c.Devices = append(c.Devices, d.GetPath())
	}
	for _, m := range ctr.GetMounts() {
		c.Mounts = append(c.Mounts, m.GetDestination())
	}
	return c
}

// driver reads the node's driver state afresh: the marker and the spec
// change at every driver load and spec regeneration.
func (p *Plugin) driver() (Driver, error) {
	m := marker.Dir{Path: p.HostPath(p.MarkerDir)}
	d := Driver{Node: p.Node, SpecPath: p.SpecFile, RequireMarker: p.RequireMarker, MarkerFile: path.Join(p.MarkerDir, contract.MarkerFile)}
	v, ok, err := m.Ready()
	if err != nil {
		return d, fmt.Errorf("node %s: %w", p.Node, err)
	}
	d.Ready, d.ReadyVersion = ok, v
	s, err := cdiapi.ReadSpec(p.HostPath(p.SpecFile), 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		d.SpecErr = err
	default:
		d.Spec = s.Spec
	}
	return d, nil
}
