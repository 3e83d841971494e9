package apicount

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// Addresses are what npu-apicount announces on stdout.
type Addresses struct {
	Proxy   string `json:"proxy"`
	Control string `json:"control"`
}

// cmdPath is npu-apicount's package, relative to the repository.
const cmdPath = "./tests/bench/apicount/cmd/npu-apicount"

// Build compiles npu-apicount into dir and returns its path.
func Build(ctx context.Context, dir string) (string, error) {
	root, err := testbed.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "npu-apicount")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, cmdPath)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the counting proxy (go build %s in %s): %w\n%s", cmdPath, root, err, out)
	}
	return bin, nil
}

// Remote is a counting proxy running as its own process.
type Remote struct {
	addr   Addresses
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	client *http.Client
}

// StartProcess runs the proxy binary bin in front of the API server of
// kubeconfig, forwarding every request as user (impersonated with the
// kubeconfig's credentials; "" forwards as those credentials); its log
// goes to logPath.
func StartProcess(ctx context.Context, bin, kubeconfig, user, logPath string) (*Remote, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("counting proxy log: %w", err)
	}
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--as="+user)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("counting proxy stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	r := &Remote{cmd: cmd, exited: make(chan struct{}), client: &http.Client{Timeout: 30 * time.Second}}
	announced := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			announced <- json.Unmarshal(sc.Bytes(), &r.addr)
		} else {
			announced <- fmt.Errorf("no addresses announced")
		}
		for sc.Scan() {
		}
		r.err = cmd.Wait()
		_ = logf.Close()
		close(r.exited)
	}()
	select {
	case err = <-announced:
		if err == nil && (r.addr.Proxy == "" || r.addr.Control == "") {
			err = fmt.Errorf("incomplete addresses %+v", r.addr)
		}
	case <-ctx.Done():
		err = ctx.Err()
	case <-time.After(time.Minute):
		err = fmt.Errorf("no addresses within a minute")
	}
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("counting proxy %s (log %s): %w", bin, logPath, err)
	}
	return r, nil
}

// URL is the proxy's address for the measured process.
func (r *Remote) URL() string { return r.addr.Proxy }

// Pid is the proxy process's, for its CPU.
func (r *Remote) Pid() int { return r.cmd.Process.Pid }

// WriteKubeconfig writes a kubeconfig that points at the proxy.
func (r *Remote) WriteKubeconfig(path string) error { return writeKubeconfig(r.URL(), path) }

// Snapshot returns the counts so far and resets them.
func (r *Remote) Snapshot(ctx context.Context) ([]Count, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.addr.Control+"/counts", nil)
	if err != nil {
		return nil, fmt.Errorf("counting proxy: %w", err)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the counting proxy's counts: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the counting proxy's counts: %s", resp.Status)
	}
	var cs []Count
	if err := json.NewDecoder(resp.Body).Decode(&cs); err != nil {
		return nil, fmt.Errorf("decode the counting proxy's counts: %w", err)
	}
	return cs, nil
}

// Close stops the process (SIGTERM, then SIGKILL after 10 s).
func (r *Remote) Close() error {
	select {
	case <-r.exited:
	default:
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(10 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
	}
	var ee *exec.ExitError
	if r.err != nil && (!errors.As(r.err, &ee) || ee.Exited()) {
		return fmt.Errorf("counting proxy: %w", r.err)
	}
	return nil
}
