// Package realnode runs a real Kubernetes node for the test bed: the
// upstream kubelet, containerd 2.x with its CRI plugin, runc and the CNI
// plugins, in the node's own mount, network, PID, UTS and IPC namespaces,
// the way kind's nodes are containers. The node's init (realnode/nodeinit)
// gives it its own root file system (noderoot), the test bed's control
// plane and registry are reachable at their loopback addresses through
// forwarders, and the kubelet joins as system:node:<name> with a client
// certificate of the control plane's CA. Its host root follows
// docs/host-contract.md (hostroot.go): its own /sys/module, the driver's
// modules under /lib/modules/<kernel>/updates loaded at boot with their
// device nodes, a boot ID per boot, seen by every container through the
// runc wrapper (realnode/runcwrap), and its own system bus with a stand-in
// systemd whose StartUnit("reboot.target") reboots the node (bus.go,
// reboot.go). Stop ends every process, namespace, mount, veth and cgroup
// the node made.
package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/openfuyao/npu-stack/tests/testbed/realnode/nodepaths"
)

// Config describes one real node.
type Config struct {
	// Name is the node's name, host name and kubelet identity.
	Name string
	// Dir is the node's directory on the host: its /var (kubelet and
	// containerd state, logs), the upper layers of its /etc and /usr.
	Dir string
	// BinDir holds kubelet, containerd, containerd-shim-runc-v2, runc and
	// crictl; CNIDir the CNI plugins (ci/build-nodes.sh).
	BinDir, CNIDir string
	// InitBinary is the built realnode/nodeinit.
	InitBinary string
	// APIServer is the control plane's https://127.0.0.1:<port>; the node
	// reaches it at the same address, and pods at ServiceIP:443.
	APIServer string
	// ServiceIP is the cluster IP of the default/kubernetes Service.
	ServiceIP string
	// CAPEM is the control plane's CA; CertPEM and KeyPEM the kubelet's
	// client certificate (system:node:<Name>, group system:nodes).
	CAPEM, CertPEM, KeyPEM []byte
	// Registry is the test bed's registry host (127.0.0.1:<port>), reached
	// by containerd at the same address.
	Registry string
	// SandboxImage is the pause image in Registry.
	SandboxImage string
	// PodCIDR is the node's pod subnet (host-local IPAM of the bridge).
	PodCIDR string
	// Labels are the kubelet's --node-labels.
	Labels map[string]string
	// RuncWrapper is the built realnode/runcwrap, containerd's runc.
	RuncWrapper string
	// Chip is the NPU model ("910B", "310P", "A3"; the test bed's chip
	// labels 910b, 310p, a3 are accepted) and ChipCount how many chips
	// the node has: written to chips.json for the stand-in npu-smi and
	// one /dev/davinci<N> each while the driver is loaded. Empty Chip: a
	// node without NPUs.
	Chip      string
	ChipCount int
	// FirstBoot, if set, runs on the node's first boot once its root is
	// built and before the driver modules on its disk are loaded: a hook
	// to install a driver beforehand ("driver preinstalled" nodes), with
	// the node's root at n.Path("/") and n.Command to run in it.
	FirstBoot func(ctx context.Context, n *Node) error
	// ReadOnlyRoot makes the node's root read-only apart from /var, /etc,
	// /run and /tmp, as KubeOS mounts it (openeuler-mirror/KubeOS
	// files/*.mount: / read-only, /var a bind mount of /persist/var, /etc
	// an overlay): /usr, /lib/modules and /lib are read-only. Insmod is
	// then the node's /usr/sbin/insmod (a read-only root has no other way
	// to load modules: modprobe reads only /lib/modules).
	ReadOnlyRoot bool
	Insmod       string
	// NoLogind makes a node whose machine has no logind: nothing owns
	// org.freedesktop.login1 on its bus and nothing would start it, so
	// a reboot is asked of systemd directly and the kubelet's graceful
	// node shutdown cannot run.
	NoLogind bool
}

// Node is a running real node.
type Node struct {
	cfg    Config
	api    *url.URL
	kernel string // the machine's kernel release, which the node runs
	// mu serialises boots, reboots and Stop.
	mu sync.Mutex
	// stopped is set by Stop: a reboot asked for afterwards does nothing.
	stopped bool
	// bootIDs are the node's boot IDs, first boot first; reboots the
	// reboot.target jobs systemd accepted; rebootErr the last reboot's
	// failure. Guarded by hist.
	hist      sync.Mutex
	bootIDs   []string
	reboots   int
	rebootErr error
	bus       *bus
	// logind is the current boot's stand-in logind (nil with NoLogind);
	// loginds every boot's, first boot first, guarded by hist.
	logind  *standinLogind
	loginds []*standinLogind
	// pid is the current boot's init, read by Path and Command while a
	// reboot may replace it.
	pid     atomic.Int64
	init    *exec.Cmd
	initErr chan error
	pidNS   string // "pid:[inode]" of the node's PID namespace
	netNS   string // "net:[inode]" of its network namespace
	net     nodeNet
	fwds    []*forwarder
	daemons []*exec.Cmd
}

// Start brings the node up to a running kubelet (its first boot); it
// does not wait for the node to be Ready (the test bed's WaitNode does).
// On error everything started is stopped.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("node %s: a real node needs root (namespaces, mounts, veths, cgroups); run the tests as root", cfg.Name)
	}
	for _, b := range []string{"kubelet", "containerd", "containerd-shim-runc-v2", "runc", "crictl"} {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return nil, fmt.Errorf("node %s: %s missing in %s: run `make nodes` (ci/build-nodes.sh) first", cfg.Name, b, cfg.BinDir)
		}
	}
	if _, err := os.Stat(cfg.RuncWrapper); err != nil {
		return nil, fmt.Errorf("node %s: the runc wrapper (realnode/runcwrap) %q: %w", cfg.Name, cfg.RuncWrapper, err)
	}
	api, err := url.Parse(cfg.APIServer)
	if err != nil || api.Port() == "" {
		return nil, fmt.Errorf("node %s: API server address %q: want https://127.0.0.1:<port>", cfg.Name, cfg.APIServer)
	}
	chips, err := newChips(cfg.Chip, cfg.ChipCount)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	kernel, err := kernelRelease()
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	n := &Node{cfg: cfg, api: api, kernel: kernel}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Stop())
		}
	}()
	if err := os.MkdirAll(filepath.Join(cfg.Dir, dirVar, strings.TrimPrefix(nodepaths.ControlDir, "/var/")), 0o755); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	if err := n.writeChips(chips); err != nil {
		return nil, err
	}
	if err := sweepCgroups(); err != nil {
		return nil, fmt.Errorf("node %s: cgroups of earlier test runs: %w", cfg.Name, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.boot(ctx, true); err != nil {
		return nil, err
	}
	return n, nil
}

// boot starts the node on its disk (its directory) as a machine boots: a
// new boot ID, its init in fresh namespaces (fresh /run, /dev, /tmp and
// /sys/module), the network, the driver modules the disk holds loaded,
// its system bus with the stand-in systemd, then containerd and the
// kubelet. first is the node's first boot (Config.FirstBoot runs before
// the modules load). Called with n.mu held.
func (n *Node) boot(ctx context.Context, first bool) error {
	cfg := n.cfg
	if err := n.newBootID(); err != nil {
		return err
	}
	if err := n.createCgroupRoot(); err != nil {
		return err
	}
	if err := n.startInit(ctx); err != nil {
		return err
	}
	pid := strconv.Itoa(n.init.Process.Pid)
	var err error
	if n.net, err = setupNetwork(ctx, n.init.Process.Pid, cfg.ServiceIP, n.net); err != nil {
		return fmt.Errorf("node %s: network: %w", cfg.Name, err)
	}
	nsPath := "/proc/" + pid + "/ns/net"
	for _, f := range [][2]string{
		{n.api.Host, n.api.Host},
		{cfg.ServiceIP + ":443", n.api.Host},
		{cfg.Registry, cfg.Registry},
	} {
		fw, err := startForwarder(nsPath, f[0], f[1])
		if err != nil {
			return fmt.Errorf("node %s: %w", cfg.Name, err)
		}
		n.fwds = append(n.fwds, fw)
	}
	// The configuration goes into the node's /etc overlay, which is
	// mounted already: write through the node's root.
	if err := n.writeNodeFiles(n.Path("/etc")); err != nil {
		return err
	}
	// A read-only root keeps no modules under /lib/modules: its driver
	// pod loads them.
	if err := os.MkdirAll(n.Path(n.ModulesDir()), 0o755); err != nil && !cfg.ReadOnlyRoot {
		return fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	if first && cfg.FirstBoot != nil {
		if err := cfg.FirstBoot(ctx, n); err != nil {
			return fmt.Errorf("node %s: first boot: %w", cfg.Name, err)
		}
	}
	if err := n.loadDriver(); err != nil {
		return err
	}
	n.logind = nil
	if !cfg.NoLogind {
		n.logind = &standinLogind{node: cfg.Name, fifoDir: n.Path(inhibitDir), delayMax: defaultInhibitDelayMax,
			rec: &LogindRecord{}, held: map[int]*os.File{}}
	}
	n.hist.Lock()
	n.loginds = append(n.loginds, n.logind)
	n.hist.Unlock()
	if err := n.startBus(ctx); err != nil {
		return err
	}
	if err := n.startDaemon("containerd", "--config", containerdConfig); err != nil {
		return err
	}
	if err := n.waitContainerd(ctx); err != nil {
		return err
	}
	args := []string{
		"--config=" + kubeletConfig,
		"--kubeconfig=" + kubeletKubeconfig,
		"--hostname-override=" + cfg.Name,
		"--node-ip=" + n.net.nodeIP,
		"--v=2",
	}
	if len(cfg.Labels) > 0 {
		args = append(args, "--node-labels="+labelFlag(cfg.Labels))
	}
	return n.startDaemon("kubelet", args...)
}

// startInit starts nodeinit in new namespaces and waits for its report
// that the node's root is built.
func (n *Node) startInit(ctx context.Context) error {
	plan, err := n.rootPlan()
	if err != nil {
		return err
	}
	planPath := filepath.Join(n.cfg.Dir, "root-plan.json")
	if err := plan.Write(planPath); err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(n.cfg.Dir, "init.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	defer func() { _ = log.Close() }()
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	defer func() { _ = r.Close() }()
	cmd := exec.Command(n.cfg.InitBinary, planPath)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC,
		// The node dies with the test binary: the kernel kills the PID
		// namespace's processes when its init ends.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return fmt.Errorf("node %s: start %s: %w", n.cfg.Name, n.cfg.InitBinary, err)
	}
	_ = w.Close()
	n.init = cmd
	n.pid.Store(int64(cmd.Process.Pid))
	n.initErr = make(chan error, 1)
	go func() { n.initErr <- cmd.Wait() }()
	n.pidNS, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", cmd.Process.Pid))
	n.netNS, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid))
	// The init reports "ok" or its error, or dies (EOF) trying.
	status := make(chan string, 1)
	go func() {
		b := make([]byte, 4096)
		k, _ := r.Read(b)
		status <- strings.TrimSpace(string(b[:k]))
	}()
	select {
	case msg := <-status:
		if msg != "ok" {
			return fmt.Errorf("node %s: init: %q (log %s)", n.cfg.Name, msg, filepath.Join(n.cfg.Dir, "init.log"))
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("node %s: waiting for its init to build the root: %w", n.cfg.Name, ctx.Err())
	}
}

// Path is where path inside the node is on the host while the node runs
// (through its init's root).
func (n *Node) Path(path string) string {
	return fmt.Sprintf("/proc/%d/root%s", n.pid.Load(), path)
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// IP is the node's InternalIP.
func (n *Node) IP() string { return n.net.nodeIP }

// InitPID is the host PID of the node's init: `nsenter --target <pid>
// --all` enters the node.
func (n *Node) InitPID() int { return int(n.pid.Load()) }

// LogPath is the host path of a daemon's log ("kubelet", "containerd").
func (n *Node) LogPath(daemon string) string {
	return filepath.Join(n.cfg.Dir, dirVar, "log", daemon+".log")
}

// nsenterArgs run argv in every namespace of the node, in its root.
func (n *Node) nsenterArgs(argv ...string) []string {
	return append([]string{"--target", strconv.Itoa(n.InitPID()),
		"--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wd", "--"}, argv...)
}

// Command is a command run inside the node (its namespaces and root),
// with the node's binaries first on PATH.
func (n *Node) Command(ctx context.Context, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", n.nsenterArgs(argv...)...)
	cmd.Env = []string{"PATH=" + nodePath, "HOME=/root"}
	return cmd
}

// Crictl runs crictl on the node and returns its output.
func (n *Node) Crictl(ctx context.Context, args ...string) ([]byte, error) {
	out, err := n.Command(ctx, append([]string{BinDir + "/crictl"}, args...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out, fmt.Errorf("node %s: crictl %s: %w: %s", n.cfg.Name, strings.Join(args, " "), err, ee.Stderr)
		}
		return out, fmt.Errorf("node %s: crictl %s: %w", n.cfg.Name, strings.Join(args, " "), err)
	}
	return out, nil
}

// RunningContainers are the names of the containers the node's runtime
// runs (crictl ps: the runtime's own view, not the pods' status), sorted,
// each once.
func (n *Node) RunningContainers(ctx context.Context) ([]string, error) {
	out, err := n.Crictl(ctx, "ps", "-o", "json")
	if err != nil {
		return nil, err
	}
	var list struct {
		Containers []struct {
			Metadata struct{ Name string } `json:"metadata"`
			State    string                `json:"state"`
		} `json:"containers"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("node %s: crictl ps -o json: %w", n.cfg.Name, err)
	}
	var names []string
	for _, c := range list.Containers {
		if c.State == "CONTAINER_RUNNING" && !slices.Contains(names, c.Metadata.Name) {
			names = append(names, c.Metadata.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

func (n *Node) startDaemon(name string, args ...string) error {
	log, err := os.OpenFile(n.LogPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.cfg.Name, err)
	}
	defer func() { _ = log.Close() }()
	cmd := exec.Command("nsenter", n.nsenterArgs(append([]string{BinDir + "/" + name}, args...)...)...)
	cmd.Env = []string{"PATH=" + nodePath, "HOME=/root"}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("node %s: start %s: %w", n.cfg.Name, name, err)
	}
	n.daemons = append(n.daemons, cmd)
	go func() { _ = cmd.Wait() }()
	return nil
}

// waitContainerd polls crictl until containerd's CRI answers: start-up
// has nothing to watch.
func (n *Node) waitContainerd(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-n.initErr:
			n.initErr <- err
			return false, fmt.Errorf("init exited: %w", err)
		default:
		}
		_, last = n.Crictl(ctx, "--timeout=2s", "info")
		return last == nil, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("node %s: waiting for containerd (log %s): %w (last: %w)", n.cfg.Name, n.LogPath("containerd"), err, last)
	}
	if err != nil {
		return fmt.Errorf("node %s: waiting for containerd (log %s): %w", n.cfg.Name, n.LogPath("containerd"), err)
	}
	return nil
}
