package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// server is one device type's plugin endpoint.
type server struct {
	pluginapi.UnimplementedDevicePluginServer
	devType string
	dir     string // the kubelet's device-plugin directory
	devDir  string // where the device nodes are ("/dev")

	mu      sync.Mutex
	chips   []Chip
	changed chan struct{} // closed and replaced on every change
}

func newServer(devType, dir, devDir string, chips []Chip) *server {
	return &server{devType: devType, dir: dir, devDir: devDir, chips: chips, changed: make(chan struct{})}
}

// socket is the plugin's socket: <type>.sock in the kubelet's directory
// (pkg/server/server.go l.148, l.170).
func (s *server) socket() string { return filepath.Join(s.dir, s.devType+".sock") }

// setChips publishes a new chip list to ListAndWatch.
func (s *server) setChips(chips []Chip) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chips = chips
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *server) snapshot() ([]Chip, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chips, s.changed
}

func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the chips with their health, and again on every
// change.
func (s *server) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		chips, changed := s.snapshot()
		resp := &pluginapi.ListAndWatchResponse{}
		for _, c := range chips {
			health := pluginapi.Healthy
			if !c.Healthy() {
				health = pluginapi.Unhealthy
			}
			resp.Devices = append(resp.Devices, &pluginapi.Device{ID: c.DeviceName(), Health: health})
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// Allocate hands each container the control devices and its chips'
// /dev/davinci<N>, read-write, and nothing else: without Ascend Docker
// Runtime v7.3.0 returns DeviceSpecs only (pkg/server/plugin.go Allocate,
// mountDefaultDevice, mountDevice; pkg/common/common.go
// GetDefaultDevices: davinci_manager, which it requires, then hisi_hdc,
// devmm_svm and dvpp_cmdlist when present).
func (s *server) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	chips, _ := s.snapshot()
	byName := map[string]Chip{}
	for _, c := range chips {
		byName[c.DeviceName()] = c
	}
	resp := &pluginapi.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		var specs []*pluginapi.DeviceSpec
		for _, d := range []string{"davinci_manager", "hisi_hdc", "devmm_svm", "dvpp_cmdlist"} {
			if _, err := os.Stat(filepath.Join(s.devDir, d)); err != nil {
				if d != "davinci_manager" {
					continue
				}
				return nil, fmt.Errorf("allocate %v: device /dev/%s: %w", creq.DevicesIds, d, err)
			}
			specs = append(specs, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + d, HostPath: "/dev/" + d, Permissions: "rw"})
		}
		for _, id := range creq.DevicesIds {
			c, ok := byName[id]
			if !ok {
				return nil, fmt.Errorf("allocate: unknown device %s", id)
			}
			p := fmt.Sprintf("/dev/davinci%d", c.PhyID)
			specs = append(specs, &pluginapi.DeviceSpec{ContainerPath: p, HostPath: p, Permissions: "rw"})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{Devices: specs})
	}
	return resp, nil
}

// serve listens on the plugin's socket and registers with the kubelet.
func (s *server) serve(ctx context.Context) (*grpc.Server, error) {
	_ = os.Remove(s.socket())
	l, err := net.Listen("unix", s.socket())
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", s.socket(), err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, s)
	go func() { _ = g.Serve(l) }()
	conn, err := grpc.NewClient("unix://"+filepath.Join(s.dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		g.Stop()
		return nil, fmt.Errorf("connect to the kubelet: %w", err)
	}
	defer func() { _ = conn.Close() }()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(s.socket()),
		ResourceName: resourcePrefix + s.devType,
	})
	if err != nil {
		g.Stop()
		return nil, fmt.Errorf("register %s%s with the kubelet (%s): %w", resourcePrefix, s.devType, filepath.Join(s.dir, "kubelet.sock"), err)
	}
	return g, nil
}
