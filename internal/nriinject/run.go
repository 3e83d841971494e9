package nriinject

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/openfuyao/npu-stack/internal/marker"
)

// Reporter tells the cluster, on the Node, whether the injector can serve:
// NoNRI when the runtime offers no NRI (why: the socket is missing or
// refuses the plugin), Registered once the runtime has taken it.
type Reporter interface {
	NoNRI(ctx context.Context, why string)
	Registered(ctx context.Context)
}

// RetryPeriod is how often the injector looks again for a runtime that
// offered no NRI: enabling NRI (a containerd configuration change and
// restart) needs no restart of the injector.
const RetryPeriod = 5 * time.Second

// Run registers p with the runtime's NRI at socket (a host path, reached
// through p.HostPath; messages name the host path) and serves until ctx ends or the runtime drops the connection
// (containerd restarted: the caller exits and is restarted). While the
// runtime offers no NRI it says so through report and tries again every
// p.RetryPeriod. Once the runtime has synchronized it, which is when it
// starts sending it every container creation, the injector's record in
// markers says so for as long as this process lives.
func Run(ctx context.Context, p *Plugin, socket string, markers marker.Dir, report Reporter) error {
	if err := markers.ClearInjector(); err != nil {
		return err
	}
	reported := ""
	period := p.RetryPeriod
	if period <= 0 {
		period = RetryPeriod
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		st, err := connect(ctx, p, socket)
		if err == nil {
			return serve(ctx, p, st, socket, markers, report)
		}
		if err.Error() != reported {
			reported = err.Error()
			p.Log.WithError(err).Warn("the container runtime offers no NRI: no chip is advertised on this node until it does")
			report.NoNRI(ctx, err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// session is one registration: the stub, and what it signals.
type session struct {
	stub   stub.Stub
	closed chan struct{}
	synced chan struct{}
}

func connect(ctx context.Context, p *Plugin, socket string) (*session, error) {
	local := p.HostPath(socket)
	if _, err := os.Stat(local); err != nil {
		return nil, fmt.Errorf("node %s: NRI socket %s: %w; the container runtime offers no NRI: enable it (containerd: [plugins.\"io.containerd.nri.v1.nri\"] disable = false, the default from 2.0) or set cdi.inject=false and mount the driver by hostPath (docs/workloads.md)", p.Node, socket, errors.Unwrap(err))
	}
	s := &session{closed: make(chan struct{}), synced: make(chan struct{}, 1)}
	r := &registered{Plugin: p, synced: func() {
		select {
		case s.synced <- struct{}{}:
		default:
		}
	}}
	st, err := stub.New(r, stub.WithPluginName(PluginName), stub.WithPluginIdx(pluginIndex),
		stub.WithSocketPath(local), stub.WithOnClose(func() { close(s.closed) }))
	if err != nil {
		return nil, fmt.Errorf("node %s: NRI plugin: %w", p.Node, err)
	}
	if err := st.Start(ctx); err != nil {
		return nil, fmt.Errorf("node %s: register with NRI at %s: %w; check that the container runtime's NRI is enabled and accepts external plugins", p.Node, socket, err)
	}
	s.stub = st
	return s, nil
}

func serve(ctx context.Context, p *Plugin, s *session, socket string, markers marker.Dir, report Reporter) error {
	defer s.stub.Stop()
	var release func()
	defer func() {
		if release != nil {
			release()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.synced:
			if release != nil { // one registration per connection
				continue
			}
			r, err := markers.HoldInjector(PluginName)
			if err != nil {
				return fmt.Errorf("node %s: record the injector's registration: %w", p.Node, err)
			}
			release = r
			p.Log.WithFields(logrus.Fields{"socket": socket, "runtimeNRI": s.stub.RuntimeNRIVersion(), "pluginNRI": s.stub.PluginNRIVersion()}).Info("registered with NRI")
			report.Registered(ctx)
		case <-s.closed:
			return fmt.Errorf("node %s: the runtime closed the NRI connection at %s (containerd restarted?); exiting so that the kubelet restarts the injector", p.Node, socket)
		}
	}
}

// registered is the plugin as the stub sees it: Synchronize, the
// runtime's last step before it sends the plugin container creations,
// records the registration.
type registered struct {
	*Plugin
	synced func()
}

func (r *registered) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	r.synced()
	return nil, nil
}
