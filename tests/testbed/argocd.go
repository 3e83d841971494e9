package testbed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// ArgoCDNamespace is where the test bed runs Argo CD: its settings, its
// repository Secret, its AppProject and the Applications tests create.
const ArgoCDNamespace = "argocd"

// ArgoCDReconciliation is argocd-cm's timeout.reconciliation (and the
// controller's --app-resync, which the stock manifests feed from it): how
// often Argo CD re-renders and re-compares an Application when nothing
// changed. Production uses 180 s; a test wants drift noticed quickly.
const ArgoCDReconciliation = 10 * time.Second

// ArgoCD is the real Argo CD (v3.6, built by ci/build-engines.sh argocd)
// running against a test-bed control plane: redis-server, the repo server
// (which renders charts with the helm v4 CLI, as the stock image does) and
// the application controller, each a local process. There is no API server
// or UI: tests create Applications with the Kubernetes API, as
// `kubectl apply -n argocd` does.
type ArgoCD struct {
	cp    *ControlPlane
	dir   string
	comps []*component
	logs  []string
	// RedisAddr, RepoServerAddr are the loopback addresses of redis and
	// the repo server's gRPC endpoint (plaintext).
	RedisAddr      string
	RepoServerAddr string
	// ctrl is the application controller; startCtrl (re)starts it and
	// waits for its health endpoint.
	ctrl      *component
	startCtrl func(ctx context.Context) error
}

// StartArgoCD starts redis-server, the repo server (helm v4 on its PATH)
// and the application controller against c's API server, in namespace
// "argocd", with what they need to reach c.Registry's OCI charts: the
// Application and AppProject CRDs of the built Argo CD, argocd-cm,
// argocd-rbac-cm, argocd-secret, the default AppProject and a repository
// Secret declaring ChartRepoURL a Helm OCI repository over plain HTTP. The
// in-cluster destination (https://kubernetes.default.svc, name
// "in-cluster") is this control plane: the controller runs with
// ARGOCD_FAKE_IN_CLUSTER and the admin kubeconfig, as Argo CD's own local
// development setup does. It returns once every process serves; on error
// the processes already started are stopped. Run one at a time per
// control plane: two controllers would both reconcile every Application.
func (c *ControlPlane) StartArgoCD(ctx context.Context) (_ *ArgoCD, err error) {
	bins, err := argoCDBinaries()
	if err != nil {
		return nil, err
	}
	a := &ArgoCD{cp: c}
	if a.dir, err = os.MkdirTemp(c.Dir, "argocd-"); err != nil {
		return nil, fmt.Errorf("argocd dir: %w", err)
	}
	defer func() {
		if err != nil {
			_ = a.Stop()
		}
	}()
	for _, d := range []string{"logs", "tmp", "home", "tls", "ssh", "gpg", "plugins"} {
		if err := os.MkdirAll(filepath.Join(a.dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("argocd dir: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := a.configure(ctx, bins.crds); err != nil {
		return nil, err
	}

	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	redisPort, repoPort, repoMetrics, ctrlMetrics := ports[0], ports[1], ports[2], ports[3]
	a.RedisAddr = "127.0.0.1:" + strconv.Itoa(redisPort)
	a.RepoServerAddr = "127.0.0.1:" + strconv.Itoa(repoPort)

	redis, err := a.start("redis-server", bins.redis, nil,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(redisPort),
		// A cache only, as in the stock install: no persistence.
		"--save", "", "--appendonly", "no", "--dir", filepath.Join(a.dir, "tmp"))
	if err != nil {
		return nil, err
	}
	if err := a.waitUp(ctx, redis, "redis PING on "+a.RedisAddr, func() error { return argoRedisPing(ctx, a.RedisAddr) }); err != nil {
		return nil, err
	}

	// Settings the stock manifests pass through the environment; the data
	// paths are the ones Argo CD's Procfile points at local directories.
	common := []string{
		"HOME=" + filepath.Join(a.dir, "home"),
		"TMPDIR=" + filepath.Join(a.dir, "tmp"),
		"ARGOCD_TLS_DATA_PATH=" + filepath.Join(a.dir, "tls"),
		"ARGOCD_SSH_DATA_PATH=" + filepath.Join(a.dir, "ssh"),
		"KUBECONFIG=" + c.Kubeconfig,
	}
	repo, err := a.start("argocd-repo-server", bins.repoServer, append(common,
		// Argo CD renders charts by running `helm` from PATH: helm v4, as
		// in the argocd image since 3.5.
		"PATH="+filepath.Dir(bins.helm)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"ARGOCD_GPG_ENABLED=false",
		"ARGOCD_GNUPGHOME="+filepath.Join(a.dir, "gpg"),
		"ARGOCD_PLUGINSOCKFILEPATH="+filepath.Join(a.dir, "plugins"),
		// Default /tmp/reposerver-ask-pass.sock would collide with any
		// other repo server on the machine.
		"ARGOCD_ASK_PASS_SOCK="+filepath.Join(a.dir, "askpass.sock"),
	),
		"--address=127.0.0.1", "--port="+strconv.Itoa(repoPort),
		"--metrics-address=127.0.0.1", "--metrics-port="+strconv.Itoa(repoMetrics),
		"--redis="+a.RedisAddr,
		// Plaintext gRPC on loopback; the default mTLS client CA path
		// must be cleared with it.
		"--disable-tls", "--client-ca-path=",
		"--logformat=text", "--loglevel=info",
	)
	if err != nil {
		return nil, err
	}
	// ?full=true makes the repo server call its own gRPC health service.
	repoHealth := fmt.Sprintf("http://127.0.0.1:%d/healthz?full=true", repoMetrics)
	if err := a.waitUp(ctx, repo, "argocd-repo-server "+repoHealth, func() error { return argoHTTPOK(ctx, repoHealth) }); err != nil {
		return nil, err
	}

	resync := strconv.Itoa(int(ArgoCDReconciliation / time.Second))
	a.startCtrl = func(ctx context.Context) error {
		ctrl, err := a.start("argocd-application-controller", bins.controller, append(common,
			"ARGOCD_FAKE_IN_CLUSTER=true",
			"ARGOCD_CONTROLLER_REPLICAS=1",
		),
			"--kubeconfig="+c.Kubeconfig, "--namespace="+ArgoCDNamespace,
			"--repo-server="+a.RepoServerAddr, "--repo-server-plaintext",
			"--redis="+a.RedisAddr,
			"--metrics-port="+strconv.Itoa(ctrlMetrics),
			"--app-resync="+resync, "--app-resync-jitter=0",
			// 2 cores: fewer workers than the stock 20 and 10.
			"--status-processors=4", "--operation-processors=2",
			"--logformat=text", "--loglevel=info",
		)
		if err != nil {
			return err
		}
		a.ctrl = ctrl
		ctrlHealth := fmt.Sprintf("http://127.0.0.1:%d/healthz", ctrlMetrics)
		return a.waitUp(ctx, ctrl, "argocd-application-controller "+ctrlHealth, func() error { return argoHTTPOK(ctx, ctrlHealth) })
	}
	if err := a.startCtrl(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// KillController ends the application controller with SIGKILL, as an OOM
// kill or a lost node does; StartController brings it back.
func (a *ArgoCD) KillController() error {
	if a.ctrl == nil {
		return errors.New("the application controller was never started")
	}
	return a.ctrl.kill()
}

// StartController starts the application controller again, with the same
// flags, and waits for its health endpoint.
func (a *ArgoCD) StartController(ctx context.Context) error { return a.startCtrl(ctx) }

type argoCDBins struct {
	redis, repoServer, controller, helm string
	crds                                []string
}

func argoCDBinaries() (argoCDBins, error) {
	var b argoCDBins
	var err error
	if b.redis, err = exec.LookPath("redis-server"); err != nil {
		return b, fmt.Errorf("argo cd needs redis-server on PATH: install the Debian package redis-server (apt-get install redis-server): %w", err)
	}
	for _, e := range []struct {
		dst *string
		rel string
	}{
		{&b.repoServer, "argocd/argocd-repo-server"},
		{&b.controller, "argocd/argocd-application-controller"},
		{&b.helm, "helm4/helm"},
	} {
		if *e.dst, err = Engine(e.rel); err != nil {
			return b, err
		}
	}
	for _, f := range []string{"application-crd.yaml", "appproject-crd.yaml"} {
		p, err := Engine("argocd/crds/" + f)
		if err != nil {
			return b, err
		}
		b.crds = append(b.crds, p)
	}
	return b, nil
}

// start runs bin with env added to the test's environment (through
// env(1), which execs bin in place: same process, same process group).
func (a *ArgoCD) start(name, bin string, env []string, args ...string) (*component, error) {
	cmdBin, cmdArgs := bin, args
	if len(env) > 0 {
		envBin, err := exec.LookPath("env")
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		cmdBin, cmdArgs = envBin, append(append(append([]string{}, env...), bin), args...)
	}
	comp, err := startComponent(name, cmdBin, cmdArgs, filepath.Join(a.dir, "logs"))
	if err != nil {
		return nil, err
	}
	a.comps = append(a.comps, comp)
	a.logs = append(a.logs, comp.logPath)
	return comp, nil
}

// waitUp polls probe until it succeeds, failing at once if comp exits.
// Start-up is the one wait with nothing to watch.
func (a *ArgoCD) waitUp(ctx context.Context, comp *component, what string, probe func() error) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		if err := comp.exited(); err != nil {
			return false, err
		}
		last = probe()
		return last == nil, nil
	})
	if err == nil {
		return nil
	}
	if exitErr := comp.exited(); exitErr != nil {
		return fmt.Errorf("waiting for %s: %w", what, exitErr)
	}
	return fmt.Errorf("waiting for %s: %w (last error: %w); last log lines of %s:\n%s", what, err, last, comp.logPath, tail(comp.logPath, 20))
}

func argoHTTPOK(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

func argoRedisPing(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("redis answered %q to PING", line)
	}
	return nil
}

// Namespace is Argo CD's namespace, where Applications go.
func (a *ArgoCD) Namespace() string { return ArgoCDNamespace }

// LogPaths are the log files of redis, the repo server and the
// application controller, for a failed test's report.
func (a *ArgoCD) LogPaths() []string { return slices.Clone(a.logs) }

// Stop stops the application controller, the repo server and redis. The
// objects Argo CD created stay in the cluster. Safe to call twice.
func (a *ArgoCD) Stop() error {
	var errs []error
	for i := len(a.comps) - 1; i >= 0; i-- {
		errs = append(errs, a.comps[i].stop(15*time.Second))
	}
	a.comps = nil
	return errors.Join(errs...)
}
