package procnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	nri "github.com/containerd/nri/pkg/adaptation"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/sirupsen/logrus"

	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

// NRISocket is where the node's runtime offers NRI, as containerd 2.x does
// by default (/var/run/nri/nri.sock, /var/run being /run).
const NRISocket = "/run/nri/nri.sock"

// maxSocketPath is the room for a path in sockaddr_un.sun_path (108 bytes
// on Linux, with its terminating NUL).
const maxSocketPath = 107

// nriRuntime is the node's NRI, restarted at each boot as containerd is
// (a boot empties /run, the socket's directory).
type nriRuntime struct {
	host *simhost.Host
	dir  string

	mu sync.Mutex
	rt *nri.Adaptation // nil while stopped
}

func (r *nriRuntime) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rt != nil {
		return nil
	}
	rt, err := startNRI(r.host, r.dir)
	r.rt = rt
	return err
}

func (r *nriRuntime) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rt != nil {
		r.rt.Stop()
		r.rt = nil
	}
}

// startNRI serves NRI on the node's simulated host with NRI's own runtime
// side (the adaptation containerd embeds), so that the chart's NRI
// injector registers here as on a real node. Containers of this stand-in
// kubelet are not created through it: injection itself is tested on the
// real nodes. The caller stops the returned runtime.
func startNRI(h *simhost.Host, dir string) (*nri.Adaptation, error) {
	quietNRI.Do(func() { nrilog.Set(errorsOnly{}) })
	sock := h.Path(NRISocket)
	if len(sock) > maxSocketPath {
		return nil, fmt.Errorf("NRI socket path %s is %d bytes, more than a Unix socket allows (%d): give the node a shorter directory", sock, len(sock), maxSocketPath)
	}
	if err := os.MkdirAll(filepath.Join(dir, "nri", "plugins"), 0o755); err != nil {
		return nil, fmt.Errorf("NRI: %w", err)
	}
	rt, err := nri.New("procnode", "v0",
		func(ctx context.Context, cb nri.SyncCB) error { _, err := cb(ctx, nil, nil); return err },
		func(context.Context, []*nri.ContainerUpdate) ([]*nri.ContainerUpdate, error) { return nil, nil },
		nri.WithSocketPath(sock), nri.WithPluginPath(filepath.Join(dir, "nri", "plugins")), nri.WithPluginConfigPath(filepath.Join(dir, "nri", "conf")))
	if err != nil {
		return nil, fmt.Errorf("NRI: %w", err)
	}
	if err := rt.Start(); err != nil {
		return nil, fmt.Errorf("NRI at %s: %w", sock, err)
	}
	return rt, nil
}

// quietNRI: NRI's logger is one per process (nrilog.Set), and its runtime
// side logs every start and stop at info level: a fleet of process nodes
// rebooting would fill the demo's output. It is set once, before the
// first runtime starts.
var quietNRI sync.Once

// errorsOnly passes NRI's errors to logrus and drops the rest.
type errorsOnly struct{}

func (errorsOnly) Debugf(context.Context, string, ...any) {}
func (errorsOnly) Infof(context.Context, string, ...any)  {}
func (errorsOnly) Warnf(context.Context, string, ...any)  {}
func (errorsOnly) Errorf(_ context.Context, format string, args ...any) {
	logrus.Errorf("NRI: "+format, args...)
}

// StopNRI takes the node's NRI away, as on a runtime without NRI: its
// socket is gone until StartNRI or the next boot.
func (n *Node) StopNRI() { n.nri.stop() }

// StartNRI offers NRI again (a runtime reconfigured and restarted).
func (n *Node) StartNRI() error { return n.nri.start() }
