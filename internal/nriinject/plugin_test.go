package nriinject

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	yaml "go.yaml.in/yaml/v3"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/openfuyao/npu-stack/internal/marker"
)

// TestPluginThroughNRI runs the injector against NRI's own runtime side
// (the adaptation containerd embeds) on a socket: it registers, marks
// itself registered once synchronized, injects a chip container, leaves a
// container without chips alone and refuses one while the driver is not
// ready. The host root is a directory holding the spec, the markers and a
// device node stand-in.
func TestPluginThroughNRI(t *testing.T) {
	root := t.TempDir()
	hostPath := func(p string) string { return filepath.Join(root, p) }
	var err error
	spec := nodeSpec(2, "25.5.0")
	if spec.Version, err = specs.MinimumRequiredVersion(spec); err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, hostPath("/var/run/cdi/huawei-com-npu.yaml"), b)
	markers := marker.Dir{Path: hostPath("/run/npu-stack")}
	if err := markers.SetReady("25.5.0"); err != nil {
		t.Fatal(err)
	}
	log, hook := test.NewNullLogger()
	p := &Plugin{Node: "n1", SpecFile: "/var/run/cdi/huawei-com-npu.yaml", MarkerDir: "/run/npu-stack", RequireMarker: true,
		Own: Own{Namespace: "npu-operator", Instance: "npu-stack"}, HostPath: hostPath, Log: log}

	sock := "/run/nri/nri.sock" // on the host root
	rt, err := nri.New("test-runtime", "v0",
		func(ctx context.Context, cb nri.SyncCB) error { _, err := cb(ctx, nil, nil); return err },
		func(context.Context, []*nri.ContainerUpdate) ([]*nri.ContainerUpdate, error) { return nil, nil },
		nri.WithSocketPath(hostPath(sock)), nri.WithPluginPath(t.TempDir()), nri.WithPluginConfigPath(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()

	ctx, cancel := context.WithCancel(context.Background())
	changes, err := markers.Changes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	rep := newReports()
	go func() { done <- Run(ctx, p, sock, markers, rep) }()
	for registered := false; !registered; {
		select {
		case <-changes:
			_, registered, err = markers.Injector()
			if err != nil {
				t.Fatal(err)
			}
		case err := <-done:
			t.Fatalf("injector stopped before registering: %v", err)
		}
	}

	create := func(ns, name string, devices ...string) (*api.ContainerAdjustment, error) {
		blk := rt.BlockPluginSync() // as containerd's CRI does around a creation
		defer blk.Unblock()
		c := &api.Container{Id: name, PodSandboxId: "pod", Name: name, Env: []string{"PATH=/usr/bin"}, Linux: &api.LinuxContainer{}}
		for _, d := range devices {
			c.Linux.Devices = append(c.Linux.Devices, &api.LinuxDevice{Path: d, Type: "c"})
		}
		resp, err := rt.CreateContainer(context.Background(), &api.CreateContainerRequest{
			Pod: &api.PodSandbox{Id: "pod", Name: "p", Namespace: ns}, Container: c})
		return resp.GetAdjust(), err
	}
	// As the kubelet gives them from the device plugin's Allocate.
	adj, err := create("ml", "train", "/dev/davinci_manager", "/dev/hisi_hdc", "/dev/davinci1")
	if err != nil {
		t.Fatal(err)
	}
	var dests []string
	for _, m := range adj.GetMounts() {
		dests = append(dests, m.Destination)
	}
	// In the CDI library's order (parents before children).
	if want := "/usr/local/bin/npu-smi,/usr/local/Ascend/driver/lib64,/usr/local/Ascend/driver/version.info"; strings.Join(dests, ",") != want {
		t.Errorf("chip container mounts %v, want %s", dests, want)
	}
	env := map[string]string{}
	for _, kv := range adj.GetEnv() {
		env[kv.Key] = kv.Value
	}
	if env[VisibleDevicesVar] != "1" || !strings.Contains(env["LD_LIBRARY_PATH"], "/usr/local/Ascend/driver/lib64/driver") {
		t.Errorf("chip container env %v", env)
	}
	if !logged(hook, InjectedMessage, "ml/p/train") {
		t.Errorf("no %q log line for ml/p/train: %v", InjectedMessage, hook.AllEntries())
	}
	if adj, err := create("ml", "sidecar"); err != nil || len(adj.GetMounts())+len(adj.GetEnv()) != 0 {
		t.Errorf("container without chips: %v, %v; want untouched", adj, err)
	}
	if err := markers.ClearReady(); err != nil {
		t.Fatal(err)
	}
	if _, err := create("ml", "late", "/dev/davinci_manager", "/dev/davinci0"); err == nil || !strings.Contains(err.Error(), "node n1: container ml/p/late was allocated /dev/davinci0, but NPU driver not ready") {
		t.Errorf("creation while the driver is not ready: %v; want refused naming node and reason", err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := markers.Injector(); ok {
		t.Error("injector marker left after the injector stopped")
	}
	if got := <-rep.c; got != "registered" {
		t.Errorf("reported %q, want registered", got)
	}
}

// reports records what Run reported to the Node.
type reports struct{ c chan string }

func newReports() *reports { return &reports{c: make(chan string, 16)} }

func (r *reports) NoNRI(_ context.Context, why string) { r.c <- "no NRI: " + why }
func (r *reports) Registered(context.Context)          { r.c <- "registered" }

// TestInjectorWaitsForNRI starts the injector on a node whose runtime
// offers no NRI yet: it reports that once, naming the socket and the fix,
// and registers when the runtime's NRI appears, without a restart.
func TestInjectorWaitsForNRI(t *testing.T) {
	markers := marker.Dir{Path: t.TempDir()}
	log, _ := test.NewNullLogger()
	p := &Plugin{Node: "n1", SpecFile: "/spec.yaml", HostPath: func(s string) string { return s }, Log: log, RetryPeriod: 20 * time.Millisecond}
	sock := filepath.Join(t.TempDir(), "nri.sock")
	rep := newReports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, p, sock, markers, rep) }()
	got := <-rep.c
	if !strings.HasPrefix(got, "no NRI: node n1: NRI socket "+sock) || !strings.Contains(got, "cdi.inject=false") {
		t.Fatalf("reported %q; want the missing socket, the node and the fix", got)
	}
	rt, err := nri.New("test-runtime", "v0",
		func(ctx context.Context, cb nri.SyncCB) error { _, err := cb(ctx, nil, nil); return err },
		func(context.Context, []*nri.ContainerUpdate) ([]*nri.ContainerUpdate, error) { return nil, nil },
		nri.WithSocketPath(sock), nri.WithPluginPath(t.TempDir()), nri.WithPluginConfigPath(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	defer rt.Stop()
	select {
	case got = <-rep.c:
	case err := <-done:
		t.Fatalf("injector stopped: %v", err)
	}
	if got != "registered" {
		t.Fatalf("reported %q after NRI appeared, want registered (the missing socket reported once)", got)
	}
	if _, ok, err := markers.Injector(); !ok || err != nil {
		t.Fatalf("registered but no live record: %t, %v", ok, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func logged(h *test.Hook, msg, container string) bool {
	for _, e := range h.AllEntries() {
		if e.Message == msg && e.Data["container"] == container && e.Level == logrus.InfoLevel {
			return true
		}
	}
	return false
}

func mustWrite(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
