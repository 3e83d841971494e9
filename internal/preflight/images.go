package preflight

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// ImageChecker tells whether an image can be pulled for every
// architecture in archs (linux/<arch>).
type ImageChecker interface {
	Check(ctx context.Context, image string, archs []string) error
}

// Registry asks the image's registry for its manifest, authenticated with
// the chart's pull secrets, as a kubelet's pull would.
type Registry struct {
	Keychain authn.Keychain
	// Insecure allows plain-HTTP registries (lab mirrors); loopback
	// registries are plain HTTP anyway.
	Insecure bool
	// Timeout bounds one image's check, so an unreachable registry is an
	// error, not a hung hook. Default 30 s.
	Timeout time.Duration
	// ContentTimeout bounds the reading of one image's layers by
	// Contents. Default DefaultContentTimeout.
	ContentTimeout time.Duration
}

// ErrMissingArch is an image that exists but not for an architecture of
// the nodes that pull it.
var ErrMissingArch = errors.New("no variant for the nodes' architecture")

func (r Registry) Check(ctx context.Context, image string, archs []string) error {
	ref, kc, err := r.reference(image)
	if err != nil {
		return err
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	desc, err := remote.Get(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(kc))
	if err != nil {
		return registryError(ctx, ref, timeout, err)
	}
	have, err := platforms(desc)
	if err != nil {
		return fmt.Errorf("read the manifest of %s: %w", image, err)
	}
	var missing []string
	for _, a := range archs {
		if !slices.Contains(have, a) {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: it has linux/%s, the nodes need linux/%s", ErrMissingArch, strings.Join(have, ", linux/"), strings.Join(missing, ", linux/"))
	}
	return nil
}

// platforms lists the linux architectures an image offers: every entry
// of an index, or the one of a single manifest's config.
func platforms(desc *remote.Descriptor) ([]string, error) {
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, err
		}
		m, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		var out []string
		for _, d := range m.Manifests {
			if d.Platform != nil && d.Platform.OS == "linux" && !slices.Contains(out, d.Platform.Architecture) {
				out = append(out, d.Platform.Architecture)
			}
		}
		return out, nil
	}
	img, err := desc.Image()
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	return []string{cf.Architecture}, nil
}

// registryError turns a failed manifest request into what the admin
// must check.
func registryError(ctx context.Context, ref name.Reference, timeout time.Duration, err error) error {
	var terr *transport.Error
	switch {
	case errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound:
		return fmt.Errorf("registry %s has no such tag or repository: %w", ref.Context().RegistryStr(), err)
	case errors.As(err, &terr) && (terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden):
		return fmt.Errorf("registry %s refused the credentials (check that imagePullSecrets names a kubernetes.io/dockerconfigjson Secret with a valid user and password for %s): %w", ref.Context().RegistryStr(), ref.Context().RegistryStr(), err)
	case ctx.Err() != nil:
		return fmt.Errorf("registry %s did not answer within %s (check its address and the network from the cluster to it): %w", ref.Context().RegistryStr(), timeout, err)
	default:
		return fmt.Errorf("registry %s unreachable (check its address and the network from the cluster to it): %w", ref.Context().RegistryStr(), err)
	}
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
	matches, err := filepath.Glob(filepath.Join(dir, "*", ".dockerconfigjson"))
	if err != nil {
		return nil, fmt.Errorf("pull secrets in %s: %w", dir, err)
	}
	payloads := map[string][]byte{}
	for _, f := range matches {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read pull secret %s: %w", f, err)
		}
		payloads[f] = b
	}
	return PullSecretKeychain(payloads)
}

// PullSecretKeychain serves the credentials of kubernetes.io/dockerconfigjson
// payloads by name (a secret or its file; errors name it), the first name
// in order winning for a registry as the kubelet's first matching pull
// secret does, then the default keychain (the process's docker config).
func PullSecretKeychain(payloads map[string][]byte) (authn.Keychain, error) {
	kc := secretKeychain{}
	names := slices.Sorted(maps.Keys(payloads))
	slices.Reverse(names)
	for _, name := range names {
		b := payloads[name]
		var cfg dockerConfig
		if err := json.Unmarshal(b, &cfg); err != nil {
			return nil, fmt.Errorf("pull secret %s is not a dockerconfigjson: %w", name, err)
		}
		for host, a := range cfg.Auths {
			ac := authn.AuthConfig{Username: a.Username, Password: a.Password}
			if a.Auth != "" {
				raw, err := base64.StdEncoding.DecodeString(a.Auth)
				user, pass, ok := strings.Cut(string(raw), ":")
				if err != nil || !ok {
					return nil, fmt.Errorf("pull secret %s: auth for %s is not base64 user:password", name, host)
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
