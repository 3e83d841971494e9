package testbed

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/tests/testbed/realnode"
)

// RealNodeLabel marks the nodes that run a real kubelet, containerd and
// runc (package realnode).
const RealNodeLabel = "npu-stack.test/real-node"

// NodesDir is where ci/build-nodes.sh puts the real nodes' binaries:
// $NPU_STACK_NODES_DIR or <repo>/.cache/nodes, once `make test`'s
// background build is done.
func NodesDir() (string, error) {
	if err := waitBuild(BuildNodes); err != nil {
		return "", err
	}
	dir := os.Getenv("NPU_STACK_NODES_DIR")
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, ".cache", "nodes")
	}
	if _, err := os.Stat(filepath.Join(dir, "stamp")); err != nil {
		return "", fmt.Errorf("real-node binaries missing in %s: run `make nodes` (ci/build-nodes.sh) first", dir)
	}
	return dir, nil
}

// RealNodeOptions tune AddRealNode.
type RealNodeOptions struct {
	// FirstBoot runs on the node's first boot before the driver modules
	// on its disk load (realnode.Config.FirstBoot): install a driver
	// there for a "driver preinstalled" node.
	FirstBoot func(ctx context.Context, n *realnode.Node) error
	// ReadOnlyRoot gives the node KubeOS's read-only root, with Insmod
	// (the stand-in kit's) as its /usr/sbin/insmod (realnode.Config).
	ReadOnlyRoot bool
	Insmod       string
	// NoLogind makes a node whose machine has no logind
	// (realnode.Config.NoLogind).
	NoLogind bool
}

// realNodeKit is what every real node of an Env shares, made on the
// first AddRealNode: the built init and the sandbox image in the registry.
type realNodeKit struct {
	nodesDir, initBinary, runcWrapper, sandboxImage, serviceIP string
}

// AddRealNode starts a real node (realnode) joined to the control plane
// as system:node:<name>, with spec's labels plus RealNodeLabel. An NPU
// node's host root has spec.ChipCount chips of spec.Chip (chips.json) and
// no driver loaded; its kernel label is the machine's kernel, which the
// node runs (a spec.Kernel naming another is an error). It does not wait
// for the node to be Ready.
func (e *Env) AddRealNode(ctx context.Context, spec NodeSpec, opts ...RealNodeOptions) (*realnode.Node, error) {
	var opt RealNodeOptions
	for _, o := range opts {
		if o.FirstBoot != nil {
			opt.FirstBoot = o.FirstBoot
		}
		opt.ReadOnlyRoot = opt.ReadOnlyRoot || o.ReadOnlyRoot
		if o.Insmod != "" {
			opt.Insmod = o.Insmod
		}
		opt.NoLogind = opt.NoLogind || o.NoLogind
	}
	kernel, err := realnode.MachineKernel()
	if err != nil {
		return nil, err
	}
	if spec.Kernel != "" && spec.Kernel != kernel {
		return nil, fmt.Errorf("real node %s-*: kernel %q: a real node runs this machine's kernel %s; leave NodeSpec.Kernel empty or set it to that", spec.Prefix, spec.Kernel, kernel)
	}
	spec.Kernel = kernel
	spec = spec.withDefaults()
	kit, err := e.realKit(ctx)
	if err != nil {
		return nil, err
	}
	nodeName := e.nextName(spec.Prefix)
	cert, key, err := e.IssueClientCert(realnode.UserName(nodeName), "system:nodes")
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", nodeName, err)
	}
	labels := spec.NodeLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[RealNodeLabel] = "true"
	e.mu.Lock()
	podNet := e.podNets
	e.podNets++
	e.mu.Unlock()
	chip, chipCount := spec.Chip, spec.ChipCount
	if spec.CPU {
		chip, chipCount = "", 0
	}
	node, err := realnode.Start(ctx, realnode.Config{
		Name:         nodeName,
		Dir:          filepath.Join(e.Dir, "realnodes", nodeName),
		BinDir:       filepath.Join(kit.nodesDir, "bin"),
		CNIDir:       filepath.Join(kit.nodesDir, "cni"),
		InitBinary:   kit.initBinary,
		APIServer:    e.Host(),
		ServiceIP:    kit.serviceIP,
		CAPEM:        e.CAData(),
		CertPEM:      cert,
		KeyPEM:       key,
		Registry:     e.Registry.Host,
		SandboxImage: kit.sandboxImage,
		// 10.245.0.0/16: apart from KWOK's fake pod IPs (10.244.0.0/16).
		PodCIDR:      fmt.Sprintf("10.245.%d.0/24", podNet%256),
		Labels:       labels,
		RuncWrapper:  kit.runcWrapper,
		Chip:         chip,
		ChipCount:    chipCount,
		FirstBoot:    opt.FirstBoot,
		ReadOnlyRoot: opt.ReadOnlyRoot,
		Insmod:       opt.Insmod,
		NoLogind:     opt.NoLogind,
	})
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.realNodes = append(e.realNodes, node)
	e.mu.Unlock()
	return node, nil
}

func (e *Env) realKit(ctx context.Context) (*realNodeKit, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kit != nil {
		return e.kit, nil
	}
	dir, err := NodesDir()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(e.Dir, "realnodes", "bin")
	kit := &realNodeKit{nodesDir: dir, initBinary: filepath.Join(bin, "nodeinit"), runcWrapper: filepath.Join(bin, "runcwrap")}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, fmt.Errorf("real nodes: %w", err)
	}
	// One go build for both: the node's init and its runc wrapper.
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+"/", "./tests/testbed/realnode/nodeinit", "./tests/testbed/realnode/runcwrap")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the real nodes' init and runc wrapper: %w\n%s", err, out)
	}
	if kit.sandboxImage, err = pushPause(ctx, e.Registry, dir); err != nil {
		return nil, err
	}
	svc, err := e.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the kubernetes Service's cluster IP, which real nodes serve: %w", err)
	}
	kit.serviceIP = svc.Spec.ClusterIP
	e.kit = kit
	return kit, nil
}

// pushPause pushes upstream's pause program (built by ci/build-nodes.sh)
// as the image upstream's build/pause/Dockerfile makes: /pause, run as
// 65535:65535. It is every real node's sandbox image.
func pushPause(ctx context.Context, reg *Registry, nodesDir string) (string, error) {
	bin, err := os.ReadFile(filepath.Join(nodesDir, "bin", "pause"))
	if err != nil {
		return "", fmt.Errorf("pause image: %w", err)
	}
	ver, err := os.ReadFile(filepath.Join(nodesDir, "pause-version"))
	if err != nil {
		return "", fmt.Errorf("pause image: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}); err != nil {
		return "", fmt.Errorf("pause image: %w", err)
	}
	if _, err := tw.Write(bin); err != nil {
		return "", fmt.Errorf("pause image: %w", err)
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("pause image: %w", err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return "", fmt.Errorf("pause image: %w", err)
	}
	img, err := mutate.ConfigFile(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), &v1.ConfigFile{
		OS: "linux", Architecture: runtime.GOARCH, // the machine the real nodes run on
		Config: v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return "", fmt.Errorf("pause image: %w", err)
	}
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return "", fmt.Errorf("pause image: %w", err)
	}
	ref := reg.Host + "/npu-stack-testbed/pause:" + strings.TrimSpace(string(ver))
	tag, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("pause image %s: %w", ref, err)
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(reg.Keychain())); err != nil {
		return "", fmt.Errorf("push pause image %s: %w", ref, err)
	}
	return ref, nil
}
