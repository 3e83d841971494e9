package preflight

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// ImageChecker tells whether an image can be pulled.
type ImageChecker interface {
	Check(ctx context.Context, image string) error
}

// Registry checks images with a HEAD request to their registry,
// authenticated with the chart's pull secrets.
type Registry struct {
	Keychain authn.Keychain
	// Insecure allows plain-HTTP registries (tests, lab mirrors).
	Insecure bool
}

func (r Registry) Check(ctx context.Context, image string) error {
	var opts []name.Option
	if r.Insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(image, opts...)
	if err != nil {
		return fmt.Errorf("invalid image reference: %w", err)
	}
	kc := r.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	if _, err := remote.Head(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(kc)); err != nil {
		return fmt.Errorf("registry says: %w", err)
	}
	return nil
}

// dockerConfig is a kubernetes.io/dockerconfigjson secret's payload.
type dockerConfig struct {
	Auths map[string]dockerAuth `json:"auths"`
}

type dockerAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Auth     string `json:"auth"`
}

// secretKeychain serves credentials of mounted pull secrets.
type secretKeychain map[string]authn.AuthConfig

// LoadPullSecrets reads every <dir>/<secret>/.dockerconfigjson (the chart
// mounts imagePullSecrets there, so the hook needs no Secret RBAC). A
// missing dir means no secrets.
func LoadPullSecrets(dir string) (authn.Keychain, error) {
	kc := secretKeychain{}
	matches, err := filepath.Glob(filepath.Join(dir, "*", ".dockerconfigjson"))
	if err != nil {
		return nil, fmt.Errorf("pull secrets in %s: %w", dir, err)
	}
	for _, f := range matches {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read pull secret %s: %w", f, err)
		}
		var cfg dockerConfig
		if err := json.Unmarshal(b, &cfg); err != nil {
			return nil, fmt.Errorf("pull secret %s is not a dockerconfigjson: %w", f, err)
		}
		for host, a := range cfg.Auths {
			ac := authn.AuthConfig{Username: a.Username, Password: a.Password}
			if a.Auth != "" {
				raw, err := base64.StdEncoding.DecodeString(a.Auth)
				user, pass, ok := strings.Cut(string(raw), ":")
				if err != nil || !ok {
					return nil, fmt.Errorf("pull secret %s: auth for %s is not base64 user:password", f, host)
				}
				ac.Username, ac.Password = user, pass
			}
			kc[registryHost(host)] = ac
		}
	}
	return authn.NewMultiKeychain(kc, authn.DefaultKeychain), nil
}

// registryHost normalises "https://index.docker.io/v1/" and "reg:5000/x"
// to the host a reference names.
func registryHost(s string) string {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
	s, _, _ = strings.Cut(s, "/")
	if s == "index.docker.io" || s == "registry-1.docker.io" {
		return name.DefaultRegistry
	}
	return s
}

func (k secretKeychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	if ac, ok := k[res.RegistryStr()]; ok {
		return authn.FromConfig(ac), nil
	}
	return authn.Anonymous, nil
}
