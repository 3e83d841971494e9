package standin

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes/fake"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/openfuyao/npu-stack/tests/testbed/standin/deviceplugin"
)

// openDevices are the device nodes under dev that process pid has open,
// by name (davinci0, davinci_manager), read from /proc/<pid>/fd as proc
// shows it.
func openDevices(t *testing.T, proc string, pid int, dev string) []string {
	t.Helper()
	fdDir := filepath.Join(proc, strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err == nil && filepath.Dir(target) == dev && strings.HasPrefix(filepath.Base(target), "davinci") {
			names = append(names, filepath.Base(target))
		}
	}
	slices.Sort(names)
	return names
}

func deviceNames(chips int) []string {
	names := []string{"davinci_manager"}
	for i := range chips {
		names = append(names, fmt.Sprintf("davinci%d", i))
	}
	slices.Sort(names)
	return names
}

// TestNPUSMIHoldsTheDeviceNodes: npu-smi opens davinci_manager and every
// chip's node in dcmi_init and keeps them until it exits. To look at it
// while it runs, its stdout is a one-page pipe that is not drained: the
// first byte shows dcmi_init has run, and with more output than the pipe
// holds npu-smi cannot exit until the test reads the rest.
func TestNPUSMIHoldsTheDeviceNodes(t *testing.T) {
	u := buildUserSpace(t)
	root := t.TempDir()
	at := func(p string) string { return filepath.Join(root, p) }
	const chips = 16
	if err := LoadDriver(at, LoadedModules, NewChips(Model910B, chips), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(at("/usr/local/Ascend/driver"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(at(versionFile), []byte(VersionInfo("25.5.0")), 0o444); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	const pipeSize = 4096
	if _, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, pipeSize); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(u.NPUSMI(), "info")
	cmd.Env = []string{"NPU_STACK_TESTBED_ROOT=" + root, "LD_LIBRARY_PATH=" + strings.Join(u.LibDirs(), ":")}
	cmd.Stdout = w
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	first := make([]byte, 1)
	if _, err := io.ReadFull(r, first); err != nil {
		_ = cmd.Wait()
		t.Fatalf("npu-smi printed nothing: %v, stderr %q", err, stderr.String())
	}
	held := openDevices(t, "/proc", cmd.Process.Pid, at("/dev"))
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("npu-smi info: %v, stderr %q", err, stderr.String())
	}
	if len(rest)+1 <= pipeSize {
		t.Fatalf("npu-smi printed %d bytes, too few to keep it running past a %d-byte pipe", len(rest)+1, pipeSize)
	}
	if want := deviceNames(chips); !slices.Equal(held, want) {
		t.Errorf("npu-smi holds %v, want %v", held, want)
	}
}

// fakeKubelet takes the device plugin's registration.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
}

func (fakeKubelet) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if req.ResourceName != "huawei.com/Ascend910" {
		return nil, fmt.Errorf("resource %s, want huawei.com/Ascend910", req.ResourceName)
	}
	return &pluginapi.Empty{}, nil
}

// logLines passes on what a log.Logger writes, a message per write,
// dropping messages nobody waits for.
type logLines chan string

func (c logLines) Write(p []byte) (int, error) {
	select {
	case c <- string(p):
	default:
	}
	return len(p), nil
}

// TestDevicePluginHoldsTheDeviceNodes: the stand-in device plugin, once
// it has read the chips, holds davinci_manager and its chips' nodes
// until it stops (its Run, with a fake kubelet and API server).
func TestDevicePluginHoldsTheDeviceNodes(t *testing.T) {
	u := buildUserSpace(t)
	root := t.TempDir()
	at := func(p string) string { return filepath.Join(root, p) }
	const chips = 2
	if err := LoadDriver(at, LoadedModules, NewChips(Model910B, chips), 0o666); err != nil {
		t.Fatal(err)
	}
	// dcmi-query finds the chips under the root and libdcmi.so on the
	// library path, as in the plugin's image.
	t.Setenv("NPU_STACK_TESTBED_ROOT", root)
	t.Setenv("LD_LIBRARY_PATH", strings.Join(u.LibDirs(), ":"))
	pluginDir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(pluginDir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(g, fakeKubelet{})
	go func() { _ = g.Serve(l) }()
	defer g.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	logged := make(logLines, 16)
	go func() {
		done <- deviceplugin.Run(runCtx, deviceplugin.Config{Node: "node-a", DCMIQuery: u.DCMIQuery(), PluginDir: pluginDir,
			DevDir: at("/dev"), Client: fake.NewClientset(), Log: log.New(logged, "", 0), PollPeriod: time.Hour})
	}()
	// Run logs "registered ..." once the kubelet has answered: stopping it
	// earlier would cancel the registration under way.
	for registered := false; !registered; {
		select {
		case m := <-logged:
			registered = strings.HasPrefix(m, "registered ")
		case err := <-done:
			t.Fatalf("the device plugin stopped before registering: %v", err)
		case <-ctx.Done():
			t.Fatal("the device plugin did not register")
		}
	}
	if got, want := openDevices(t, "/proc", os.Getpid(), at("/dev")), deviceNames(chips); !slices.Equal(got, want) {
		t.Errorf("the running device plugin holds %v, want %v", got, want)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := openDevices(t, "/proc", os.Getpid(), at("/dev")); len(got) != 0 {
		t.Errorf("the stopped device plugin still holds %v", got)
	}
}

// TestExporterHoldsTheDeviceNodes: the stand-in npu-exporter, run in a
// node with the driver installed, holds davinci_manager and the chips'
// nodes from its start; while it runs the driver package refuses to
// install over the loaded driver, naming it in its log, and installs once
// it has stopped: what the product has to do before an install.
func TestExporterHoldsTheDeviceNodes(t *testing.T) {
	u := buildUserSpace(t)
	const chips = 2
	n := installedNode(t, u, chips)
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Built as the test binary is (not BuildGo's static build for the
	// images), so the build reuses its cached packages; the node's /usr is
	// the machine's, with the C library it links.
	build := exec.CommandContext(ctx, "go", "build", "-o", n.at("/usr/local/bin/npu-exporter"), "./tests/testbed/standin/cmd/npu-exporter")
	build.Dir = repo
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the exporter: %v\n%s", err, b)
	}
	b, err := os.ReadFile(u.DCMIQuery())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.at("/usr/local/bin/dcmi-query"), b, 0o555); err != nil {
		t.Fatal(err)
	}
	resp := n.must(nodeRequest{Op: "start", Until: "serving metrics on", Env: []string{exporterLDLib},
		Argv: []string{"/usr/local/bin/npu-exporter", "-ip=127.0.0.1", "-port=0"}})
	if got, want := openDevices(t, n.at("/proc"), resp.PID, n.root+"/dev"), deviceNames(chips); !slices.Equal(got, want) {
		t.Errorf("the running exporter holds %v, want %v", got, want)
	}

	code, out := n.run(stagedRun, "--full", "--quiet")
	if code != 1 || !strings.Contains(out, occupiedMessage) {
		t.Errorf("install while the exporter runs: exit %d, want 1 and %q:\n%s", code, occupiedMessage, out)
	}
	if want := fmt.Sprintf("pid %d holds /dev/davinci_manager: /usr/local/bin/npu-exporter", resp.PID); !strings.Contains(n.readFile(installLog), want) {
		t.Errorf("the install log does not have %q:\n%s", want, n.readFile(installLog))
	}
	n.kill(resp.PID)
	n.wait(resp.PID)
	if code, out := n.run(stagedRun, "--full", "--quiet"); code != 2 {
		t.Errorf("install once the exporter has stopped: exit %d, want 2:\n%s", code, out)
	}
	checkIntact(t, n, "after the install")
}
