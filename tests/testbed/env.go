package testbed

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/tests/testbed/procnode"
	"github.com/openfuyao/npu-stack/tests/testbed/realnode"
)

// Env is a control plane plus freshly built npu-stack binaries and the
// simulated nodes added to it.
type Env struct {
	*ControlPlane
	Client kubernetes.Interface
	// ProductBinDir holds npu-hooks, npu-rebooter and npu-healthwatch
	// built from this checkout for this machine (linux/runtime.GOARCH).
	ProductBinDir string
	// Product is what was built from this checkout and pushed to the
	// registry: the process-backed nodes pull and run exactly that.
	Product *Product
	// Progress is Options.Progress: what reports the setup's steps.
	Progress *Progress

	mu        sync.Mutex
	procNodes []*procnode.Node
	realNodes []*realnode.Node
	// podNets counts the pod subnets handed to real nodes, so that nodes
	// started at once get subnets of their own.
	podNets int
	kit     *realNodeKit
	seq     int
	// podIPs counts the pod addresses handed out (NodeSpec.PodIPs).
	podIPs int
}

// NodeSpec describes simulated NPU nodes to add.
type NodeSpec struct {
	// Prefix names the nodes Prefix-0, Prefix-1, ...; default "npu".
	Prefix    string
	Chip      string // default 910b
	ChipCount int    // default 8
	Kernel    string // default 5.15.0-105-generic
	OS        string // default ubuntu22.04
	// Labels are added to (and may override) the NPU labels.
	Labels map[string]string
	// Driver, if set, is loaded on the simulated host at first boot.
	Driver string
	// CPU makes a node without NPUs: none of the NPU labels (not even
	// npu.present=false, which the seed's `-l openfuyao.com/npu.present`
	// would select), only Labels.
	CPU bool
	// PodIPs gives each node's pods a loopback address of their own
	// (procnode.Config.PodIP), so every node's agents may serve metrics
	// on the chart's ports at once.
	PodIPs bool
}

func (s NodeSpec) withDefaults() NodeSpec {
	if s.Prefix == "" {
		s.Prefix = "npu"
	}
	if s.Chip == "" {
		s.Chip = "910b"
	}
	if s.ChipCount == 0 {
		s.ChipCount = 8
	}
	if s.Kernel == "" {
		s.Kernel = "5.15.0-105-generic"
	}
	if s.OS == "" {
		s.OS = "ubuntu22.04"
	}
	return s
}

// Labels are the node labels the spec gives.
func (s NodeSpec) NodeLabels() map[string]string {
	s = s.withDefaults()
	if s.CPU {
		return maps.Clone(s.Labels)
	}
	l := map[string]string{
		contract.LabelNPUPresent: "true",
		contract.LabelChip:       s.Chip,
		contract.LabelKernel:     s.Kernel,
		contract.LabelOS:         s.OS,
	}
	for k, v := range s.Labels {
		l[k] = v
	}
	return l
}

// NewEnv starts a control plane and builds the product binaries.
func NewEnv(ctx context.Context, opts Options) (*Env, error) {
	archs, err := opts.productArchs()
	if err != nil {
		return nil, err
	}
	var cp *ControlPlane
	if err := opts.Progress.Step("starting the control plane (etcd, kube-apiserver, controller manager, scheduler, KWOK) and its registry", func() (err error) {
		cp, err = Start(ctx, opts)
		return err
	}); err != nil {
		return nil, err
	}
	env := &Env{ControlPlane: cp, Progress: opts.Progress}
	if env.Client, err = kubernetes.NewForConfig(cp.Config()); err != nil {
		_ = cp.Stop()
		return nil, fmt.Errorf("client: %w", err)
	}
	if err := env.publish(ctx, archs); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return env, nil
}

// EnvSteps is the number of Progress steps NewEnv reports with opts.
func EnvSteps(opts Options) int {
	archs, _ := opts.productArchs()
	return 2 + len(archs)
}

// productArchs are opts.Archs, amd64 and arm64 by default, checked to
// hold this machine's.
func (o Options) productArchs() ([]string, error) {
	if len(o.Archs) == 0 {
		return []string{"amd64", "arm64"}, nil
	}
	if !slices.Contains(o.Archs, runtime.GOARCH) {
		return nil, fmt.Errorf("test bed: Options.Archs %v lacks this machine's %s, whose binaries the process nodes run: add it", o.Archs, runtime.GOARCH)
	}
	return o.Archs, nil
}

// publish builds the binaries for archs and pushes the images and the
// chart to the registry, as a release would.
func (e *Env) publish(ctx context.Context, archs []string) error {
	version := BuildVersion()
	dirs := map[string]string{}
	for _, arch := range archs {
		dir := filepath.Join(e.Dir, "product-bin", arch)
		what := fmt.Sprintf("building npu-hooks, npu-rebooter and npu-healthwatch %s for linux/%s (make build GOTAGS=simhost)", version, arch)
		if err := e.Progress.Step(what, func() error { return buildProductArch(ctx, dir, arch, version) }); err != nil {
			return err
		}
		dirs[arch] = dir
	}
	e.ProductBinDir = dirs[runtime.GOARCH]
	return e.Progress.Step("pushing their images and the chart to the registry "+e.Registry.Host, func() error {
		p, err := Publish(ctx, e.Registry, version, dirs, filepath.Join(e.Dir, "chart"))
		if err != nil {
			return fmt.Errorf("publish npu-stack to the test-bed registry: %w", err)
		}
		e.Product = p
		return nil
	})
}

// AddNPUNodes registers n KWOK-simulated NPU nodes (pods on them are
// marked Running without running anything) and returns their names.
func (e *Env) AddNPUNodes(ctx context.Context, n int, spec NodeSpec) ([]string, error) {
	spec = spec.withDefaults()
	return e.AddNodes(ctx, n, spec.Prefix, spec.NodeLabels())
}

// AddNodes registers n KWOK-simulated nodes with the given labels.
func (e *Env) AddNodes(ctx context.Context, n int, prefix string, labels map[string]string) ([]string, error) {
	var names []string
	for i := 0; i < n; i++ {
		name := e.nextName(prefix)
		l := map[string]string{
			corev1.LabelHostname:   name,
			corev1.LabelOSStable:   "linux",
			corev1.LabelArchStable: "amd64",
			"type":                 "kwok",
		}
		for k, v := range labels {
			l[k] = v
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      l,
			Annotations: map[string]string{KWOKAnnotation: "fake"},
		}}
		if _, err := e.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return names, fmt.Errorf("create KWOK node %s: %w", name, err)
		}
		names = append(names, name)
	}
	return names, nil
}

// AddProcessNodes registers n NPU nodes whose pods of npu-stack images run
// as real processes on a simulated host.
func (e *Env) AddProcessNodes(ctx context.Context, n int, spec NodeSpec) ([]*procnode.Node, error) {
	spec = spec.withDefaults()
	var nodes []*procnode.Node
	for i := 0; i < n; i++ {
		name := e.nextName(spec.Prefix)
		node, err := procnode.Start(ctx, procnode.Config{
			Client:     e.Client,
			RESTConfig: e.Config(),
			Name:       name,
			Labels:     spec.NodeLabels(),
			ImageDir:   filepath.Join(e.Dir, "images"),
			Dir:        filepath.Join(e.Dir, "nodes", name),
			Host:       simhost.Spec{Chip: spec.Chip, ChipCount: spec.ChipCount, Driver: spec.Driver},
			PodIP:      e.podIP(spec.PodIPs),
		})
		if err != nil {
			return nodes, err
		}
		e.mu.Lock()
		e.procNodes = append(e.procNodes, node)
		e.mu.Unlock()
		nodes = append(nodes, node)
	}
	return nodes, nil
}

// ProcessNode returns the process-backed node with the given name.
func (e *Env) ProcessNode(name string) (*procnode.Node, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range e.procNodes {
		if n.Name() == name {
			return n, true
		}
	}
	return nil, false
}

// podIP hands out 127.0.10.1, 127.0.10.2, ... (on) or "" (off).
func (e *Env) podIP(on bool) string {
	if !on {
		return ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.podIPs++
	return fmt.Sprintf("127.0.%d.%d", 10+e.podIPs/250, 1+e.podIPs%250)
}

func (e *Env) nextName(prefix string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	name := fmt.Sprintf("%s-%d", prefix, e.seq)
	e.seq++
	return name
}

// Stop stops the real nodes (every process, namespace, mount, veth and
// cgroup of theirs), the process nodes (killing their pods' processes)
// and the control plane.
func (e *Env) Stop() error {
	e.mu.Lock()
	nodes, real := e.procNodes, e.realNodes
	e.procNodes, e.realNodes = nil, nil
	e.mu.Unlock()
	var errs []error
	for _, n := range real {
		errs = append(errs, n.Stop())
	}
	for _, n := range nodes {
		n.Stop()
	}
	errs = append(errs, e.ControlPlane.Stop())
	return errors.Join(errs...)
}

// Main is the body of a TestMain: it starts one Env for the whole test
// binary, runs the tests and always stops the Env, also when tests fail.
// MainUnlessShort is Main for a package most of whose tests need no
// control plane (the chart's render and schema tests): under -short (make
// check) it runs them without starting one, and the tests that need it
// skip through NeedEnv; make test runs them all.
func MainUnlessShort(m *testing.M, env **Env) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	return Main(m, env)
}

// NeedEnv skips t when its package started no control plane (-short,
// make check); make test, which runs every test, always starts one.
func NeedEnv(t testing.TB, env *Env) {
	t.Helper()
	if env == nil {
		t.Skip("needs the local control plane, not started under -short (make check); make test runs it")
	}
}

// mainSetupTimeout bounds a test binary's Env setup in Main.
const mainSetupTimeout = 30 * time.Minute

// Builds that `make test` runs beside the tests, for Main to wait for.
const (
	// BuildEngines: the deployers (helm CLIs, helmfile, Flux, Argo CD).
	BuildEngines = "engines"
	// BuildNodes: the real nodes' kubelet, containerd, runc and CNI plugins.
	BuildNodes = "nodes"
)

// Main waits for the background builds its package needs before any
// test's clock starts: on a cold machine they take half an hour, which a
// test's own timeout must not pay for.
func Main(m *testing.M, env **Env, needs ...string) int {
	for _, what := range needs {
		if err := waitBuild(what); err != nil {
			fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
			return 1
		}
	}
	// The control plane bounds its own start (Options.StartTimeout); this
	// bounds the build and the pushes after it. On a cold Go cache the
	// first build of the product binaries compiles client-go and the rest
	// while other test binaries, and the background build of the
	// deployers, compete for the same cores: 5 minutes were not enough.
	ctx, cancel := context.WithTimeout(context.Background(), mainSetupTimeout)
	e, err := NewEnv(ctx, Options{})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testbed: %v\n", err)
		return 1
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(os.Stderr, "testbed: stop: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
