package procnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/openfuyao/npu-stack/internal/ociimage"
	"github.com/openfuyao/npu-stack/internal/preflight"
)

// pulled is an image as this node holds it after a pull.
type pulled struct {
	digest string // of the manifest for the node's platform
	// binary is the path of our executable taken from the image's layer
	// for this machine's architecture; "" for other images.
	binary string
}

// images pulls like a kubelet: an image is usable only if it resolves in
// its registry for the node's architecture, with the pod's pull secrets.
type images struct {
	client kubernetes.Interface
	arch   string
	dir    string // extracted executables, by manifest digest

	mu    sync.Mutex
	cache map[string]pulled // by image reference: what IfNotPresent reuses
}

// pull resolves c's image for the node, reusing an earlier pull unless
// the policy is Always.
func (im *images) pull(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (pulled, error) {
	im.mu.Lock()
	p, ok := im.cache[c.Image]
	im.mu.Unlock()
	if ok && c.ImagePullPolicy != corev1.PullAlways {
		return p, nil
	}
	kc, err := im.keychain(ctx, pod)
	if err != nil {
		return pulled{}, err
	}
	ref, err := name.ParseReference(c.Image)
	if err != nil {
		return pulled{}, fmt.Errorf("failed to pull image %q: invalid reference format: %w", c.Image, err)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc)}
	img, err := platformImage(ref, im.arch, opts)
	if err != nil {
		return pulled{}, fmt.Errorf("failed to pull and unpack image %q: %w", c.Image, err)
	}
	d, err := img.Digest()
	if err != nil {
		return pulled{}, fmt.Errorf("failed to pull image %q: %w", c.Image, err)
	}
	p = pulled{digest: d.String()}
	if bin := imageBinary(c.Image); bin != "" {
		// The node's architecture is only what the image must offer; the
		// process runs on this machine, so it runs this machine's variant.
		local := img
		if im.arch != runtime.GOARCH {
			if local, err = platformImage(ref, runtime.GOARCH, opts); err != nil {
				return pulled{}, fmt.Errorf("failed to pull image %q for the test machine: %w", c.Image, err)
			}
		}
		if p.binary, err = im.extract(local, bin); err != nil {
			return pulled{}, fmt.Errorf("image %q: %w", c.Image, err)
		}
	}
	im.mu.Lock()
	im.cache[c.Image] = p
	im.mu.Unlock()
	return p, nil
}

// platformImage is the image of ref for linux/arch. Unlike
// go-containerregistry, which returns a single-platform manifest whatever
// its platform, it refuses a mismatch, as containerd does.
func platformImage(ref name.Reference, arch string, opts []remote.Option) (v1.Image, error) {
	want := v1.Platform{OS: "linux", Architecture: arch}
	img, err := remote.Image(ref, append(opts, remote.WithPlatform(want))...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	if cf.OS != want.OS || cf.Architecture != want.Architecture {
		return nil, fmt.Errorf("no match for platform in manifest: image is %s/%s, node is %s/%s", cf.OS, cf.Architecture, want.OS, want.Architecture)
	}
	return img, nil
}

// extract writes our executable out of img's layers once per digest.
func (im *images) extract(img v1.Image, bin string) (string, error) {
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	path := filepath.Join(im.dir, d.Hex, bin)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	data, err := ociimage.Binary(img, bin)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	// Nodes share the directory: each writes its own temporary file and
	// the rename makes one complete copy appear.
	f, err := os.CreateTemp(filepath.Dir(path), bin+".*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o755)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, os.Rename(f.Name(), path)
}

// keychain holds the credentials of the pod's imagePullSecrets.
func (im *images) keychain(ctx context.Context, pod *corev1.Pod) (authn.Keychain, error) {
	payloads := map[string][]byte{}
	for i, ref := range pod.Spec.ImagePullSecrets {
		// The kubelet reads pull secrets with the node's credentials,
		// never the pod's: here, the admin's.
		s, err := im.client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			// The kubelet pulls without a secret it cannot read.
			continue
		}
		// Keyed so that the first listed secret wins, as in the kubelet.
		payloads[fmt.Sprintf("%03d-%s/%s", i, pod.Namespace, ref.Name)] = s.Data[corev1.DockerConfigJsonKey]
	}
	return preflight.PullSecretKeychain(payloads)
}
