// Package testbed starts a real Kubernetes control plane on loopback for
// tests and demos: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler (built from source by ci/build-controlplane.sh) and KWOK
// for simulated nodes. Nothing here is product code.
package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KWOKAnnotation marks the nodes KWOK keeps alive; process-backed nodes do
// not carry it because their own kubelet stand-in manages them.
const KWOKAnnotation = "kwok.x-k8s.io/node"

// Options configures a control plane.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubectl and kwok. Default: $NPU_STACK_CP_DIR/bin or
	// <repo>/.cache/controlplane/bin.
	BinDir string
	// Dir is where data, certificates and logs go. Default: a new temp dir,
	// removed by Stop.
	Dir string
	// StartTimeout bounds the whole start-up. Default 2 minutes.
	StartTimeout time.Duration
	// NodeMonitorGracePeriod is how long a node may go without a
	// heartbeat before the controller manager takes it for dead; 0 keeps
	// the default (50 s). The benchmark raises it so that thousands of
	// simulated nodes can renew their Leases less often.
	NodeMonitorGracePeriod time.Duration
	// RegistryPort is the loopback port of the registry; 0 picks a free
	// one (`make cluster` fixes it so the tour's commands are the same
	// every time).
	RegistryPort int
	// Archs are the architectures of the npu-stack images NewEnv builds
	// and pushes; default amd64 and arm64, a release's, which the tests
	// check. They must include this machine's (runtime.GOARCH): its
	// binaries are ProductBinDir. The demo and make cluster ask for this
	// machine's alone: the other is minutes of cross-compiling on a cold
	// Go cache, and nothing they run pulls it.
	Archs []string
	// Progress reports NewEnv's steps to a person (nil: nothing).
	Progress *Progress
}

// ControlPlane is a running local cluster.
type ControlPlane struct {
	Dir string
	// Kubeconfig is an admin kubeconfig file for kubectl, helm and friends.
	Kubeconfig string
	BinDir     string
	cfg        *rest.Config
	// Registry is the cluster's OCI registry: the images and the chart
	// the tests install come from it, as on a real cluster.
	Registry *Registry
	pki      *pki
	ownsDir  bool
	comps    []*component
}

// Config returns a fresh copy of the admin client configuration.
func (c *ControlPlane) Config() *rest.Config { return rest.CopyConfig(c.cfg) }

// CAData is the PEM of the CA that signed the API server's certificate.
func (c *ControlPlane) CAData() []byte { return []byte(c.pki.CAPEM) }

// Start brings up a control plane and waits until it serves and its
// controllers run. On error everything already started is stopped.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	binDir, err := resolveBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: opts.Dir, BinDir: binDir}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "npu-stack-cp-"); err != nil {
			return nil, fmt.Errorf("control plane dir: %w", err)
		}
		cp.ownsDir = true
	}
	defer func() {
		if err != nil {
			_ = cp.Stop()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	if cp.pki, err = newPKI(cp.Dir); err != nil {
		return nil, err
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	etcdPort, etcdPeer, apiPort, kwokPort := ports[0], ports[1], ports[2], ports[3]
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)

	if err := cp.start("etcd",
		"--name=testbed",
		"--data-dir="+filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls="+etcdURL,
		"--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=testbed="+peerURL,
		// Throw-away data: durability only costs test time.
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	); err != nil {
		return nil, err
	}
	if err := cp.waitHTTP(ctx, "etcd", etcdURL+"/health", http.DefaultClient); err != nil {
		return nil, err
	}

	if err := cp.start("kube-apiserver",
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(apiPort),
		"--tls-cert-file="+cp.pki.ServingCert,
		"--tls-private-key-file="+cp.pki.ServingKey,
		"--client-ca-file="+cp.pki.CAFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+cp.pki.SAPub,
		"--service-account-signing-key-file="+cp.pki.SAKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		// RBAC for real, so the chart's least-privilege roles are tested;
		// the Node authorizer and NodeRestriction admission, as on every
		// kubeadm cluster, for the real nodes' kubelets (system:node:<name>).
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		// The API server's client certificate towards kubelets (logs,
		// exec): a real node's kubelet authenticates it against the CA.
		"--kubelet-client-certificate="+cp.pki.AdminCert,
		"--kubelet-client-key="+cp.pki.AdminKey,
		"--allow-privileged=true",
		"--profiling=false",
		// Loopback is not a valid endpoint for the kubernetes Service; pods
		// reach the server through their kubeconfig instead.
		"--endpoint-reconciler-type=none",
		// Process nodes serve container logs on 127.0.0.1; their host
		// names do not resolve.
		"--kubelet-preferred-address-types=InternalIP",
		"--max-requests-inflight=2000",
		"--max-mutating-requests-inflight=1000",
	); err != nil {
		return nil, err
	}
	cp.cfg = &rest.Config{
		Host: "https://127.0.0.1:" + strconv.Itoa(apiPort),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   []byte(cp.pki.CAPEM),
			CertData: cp.pki.AdminCertPEM,
			KeyData:  cp.pki.AdminKeyPEM,
		},
		QPS:   200,
		Burst: 400,
	}
	if err := cp.writeKubeconfig(); err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		return nil, fmt.Errorf("client for the test API server: %w", err)
	}
	if err := cp.waitAPIServer(ctx, client); err != nil {
		return nil, err
	}

	cmArgs := []string{
		"--kubeconfig=" + cp.Kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--service-account-private-key-file=" + cp.pki.SAKey,
		"--root-ca-file=" + cp.pki.CAFile,
		"--kube-api-qps=200",
		"--kube-api-burst=400",
	}
	if opts.NodeMonitorGracePeriod > 0 {
		cmArgs = append(cmArgs, "--node-monitor-grace-period="+opts.NodeMonitorGracePeriod.String())
	}
	if err := cp.start("kube-controller-manager", cmArgs...); err != nil {
		return nil, err
	}
	if err := cp.start("kube-scheduler",
		"--kubeconfig="+cp.Kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--kube-api-qps=200",
		"--kube-api-burst=400",
	); err != nil {
		return nil, err
	}
	if err := cp.start("kwok",
		"--kubeconfig="+cp.Kubeconfig,
		"--config="+filepath.Join(filepath.Dir(binDir), "kwok-stages.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+KWOKAnnotation+"=fake",
		"--cidr=10.244.0.1/16",
		"--node-ip=127.0.0.1",
		"--server-address=127.0.0.1:"+strconv.Itoa(kwokPort),
	); err != nil {
		return nil, err
	}
	if cp.Registry, err = StartRegistry(ctx, binDir, filepath.Join(cp.Dir, "registry"), RegistryOptions{Port: opts.RegistryPort}); err != nil {
		return nil, err
	}
	cp.comps = append(cp.comps, cp.Registry.comp)
	// The default service account appears once the controller manager's
	// controllers run; pods cannot be admitted before that.
	if err := cp.waitFor(ctx, "kube-controller-manager to create the default service account", func() (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		return nil, err
	}
	return cp, nil
}

// Stop terminates every component, newest first, and removes the data
// directory if Start created it. It is safe to call more than once.
func (c *ControlPlane) Stop() error {
	var errs []error
	for i := len(c.comps) - 1; i >= 0; i-- {
		errs = append(errs, c.comps[i].stop(15*time.Second))
	}
	c.comps = nil
	if c.ownsDir && c.Dir != "" {
		errs = append(errs, os.RemoveAll(c.Dir))
		c.Dir = ""
	}
	return errors.Join(errs...)
}

func (c *ControlPlane) start(name string, args ...string) error {
	logDir := filepath.Join(c.Dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("log dir: %w", err)
	}
	comp, err := startComponent(name, filepath.Join(c.BinDir, name), args, logDir)
	if err != nil {
		return err
	}
	c.comps = append(c.comps, comp)
	return nil
}

// waitFor polls cond until it holds, failing early if any component died.
// Polling is only used for start-up, where there is nothing to watch yet.
func (c *ControlPlane) waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		for _, comp := range c.comps {
			if err := comp.exited(); err != nil {
				return false, err
			}
		}
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		if last != nil {
			return fmt.Errorf("waiting for %s: %w (last error: %w)", what, err, last)
		}
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

func (c *ControlPlane) waitHTTP(ctx context.Context, what, url string, hc *http.Client) error {
	return c.waitFor(ctx, what, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func (c *ControlPlane) waitAPIServer(ctx context.Context, client kubernetes.Interface) error {
	return c.waitFor(ctx, "kube-apiserver /readyz", func() (bool, error) {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, err
		}
		return string(body) == "ok", nil
	})
}

func (c *ControlPlane) writeKubeconfig() error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["npu-stack-local"] = &clientcmdapi.Cluster{Server: c.cfg.Host, CertificateAuthorityData: c.cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.cfg.CertData, ClientKeyData: c.cfg.KeyData}
	kc.Contexts["npu-stack-local"] = &clientcmdapi.Context{Cluster: "npu-stack-local", AuthInfo: "admin", Namespace: corev1.NamespaceDefault}
	kc.CurrentContext = "npu-stack-local"
	c.Kubeconfig = filepath.Join(c.Dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, c.Kubeconfig); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// freePorts reserves n distinct loopback ports. They are released just
// before the components bind them; a collision makes Start fail loudly.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve a loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Host is the API server's address, https://127.0.0.1:<port>.
func (c *ControlPlane) Host() string { return c.cfg.Host }
