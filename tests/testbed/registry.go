package testbed

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"golang.org/x/crypto/bcrypt"
	"k8s.io/apimachinery/pkg/util/wait"
)

// RegistryOptions configure a test-bed registry.
type RegistryOptions struct {
	// Users, when set, turn on htpasswd authentication (user → password):
	// a private registry, as an air-gapped mirror usually is.
	Users map[string]string
	// Port to listen on (127.0.0.1); 0 picks a free one.
	Port int
}

// Registry is a CNCF distribution registry on loopback, built once into
// the control-plane cache by ci/build-controlplane.sh.
type Registry struct {
	// Host is "127.0.0.1:<port>": image references start with it, and
	// go-containerregistry, Helm and containerd all speak plain HTTP to a
	// loopback registry.
	Host  string
	users map[string]string
	comp  *component
}

// StartRegistry runs a registry whose storage and log live under dir.
func StartRegistry(ctx context.Context, binDir, dir string, opts RegistryOptions) (*Registry, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("registry dir: %w", err)
	}
	bin := filepath.Join(binDir, "registry")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("registry binary missing in %s: run `make controlplane` (ci/build-controlplane.sh) first", binDir)
	}
	port := opts.Port
	if port == 0 {
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		port = ports[0]
	}
	r := &Registry{Host: "127.0.0.1:" + strconv.Itoa(port), users: opts.Users}
	auth := ""
	if len(opts.Users) > 0 {
		var lines []string
		for u, p := range opts.Users {
			h, err := bcrypt.GenerateFromPassword([]byte(p), bcrypt.MinCost)
			if err != nil {
				return nil, fmt.Errorf("htpasswd for %s: %w", u, err)
			}
			lines = append(lines, u+":"+string(h))
		}
		pw := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(pw, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("write htpasswd: %w", err)
		}
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: npu-stack-testbed\n    path: %s\n", pw)
	}
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s
%s`, filepath.Join(dir, "storage"), r.Host, auth)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("write registry config: %w", err)
	}
	var err error
	r.comp, err = startComponent("registry", bin, []string{"serve", cfgPath}, dir)
	if err != nil {
		return nil, err
	}
	if err := r.waitServing(ctx); err != nil {
		_ = r.Stop()
		return nil, err
	}
	return r, nil
}

// waitServing polls /v2/ until the registry answers (200, or 401 when it
// asks for credentials). Start-up is the one wait with nothing to watch.
func (r *Registry) waitServing(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last error
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		if err := r.comp.exited(); err != nil {
			return false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.Host+"/v2/", nil)
		if err != nil {
			return false, err
		}
		resp, derr := http.DefaultClient.Do(req)
		if derr != nil {
			last = derr
			return false, nil //nolint:nilerr // not listening yet: poll again
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the registry on %s: %w (last error: %w)", r.Host, err, last)
	}
	return nil
}

// Keychain authenticates as the registry's first user (anonymous when
// the registry is open).
func (r *Registry) Keychain() authn.Keychain {
	for u, p := range r.users {
		return staticKeychain{host: r.Host, auth: authn.FromConfig(authn.AuthConfig{Username: u, Password: p})}
	}
	return authn.DefaultKeychain
}

// DockerConfigJSON is a kubernetes.io/dockerconfigjson payload for user
// with password (any password: tests also need wrong ones).
func (r *Registry) DockerConfigJSON(user, password string) []byte {
	return fmt.Appendf(nil, `{"auths":{%q:{"username":%q,"password":%q}}}`, r.Host, user, password)
}

// Stop stops the registry; its storage goes with the directory it lives in.
func (r *Registry) Stop() error {
	if r == nil || r.comp == nil {
		return nil
	}
	err := r.comp.stop(10 * time.Second)
	r.comp = nil
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

type staticKeychain struct {
	host string
	auth authn.Authenticator
}

func (k staticKeychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	if res.RegistryStr() == k.host {
		return k.auth, nil
	}
	return authn.Anonymous, nil
}
