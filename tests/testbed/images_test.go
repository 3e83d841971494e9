package testbed_test

import (
	"context"
	"debug/buildinfo"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/ociimage"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// TestShippedImagesInTheRegistry pulls each image the test bed pushed, as
// a user's cluster would, and checks what ships: both architectures, the
// entrypoint, the user, and an amd64 binary that runs. The test bed's
// binaries are built with the tag simhost, and only so differ from a
// release's (tests/release checks the release build).
func TestShippedImagesInTheRegistry(t *testing.T) {
	ctx := ctxTimeout(t, 2*time.Minute)
	users := map[string]string{"npu-hooks": "65532:65532", "npu-healthwatch": "65532:65532", "npu-rebooter": "0:0"}
	for bin, user := range users {
		ref, err := name.ParseReference(env.Product.Images[bin])
		if err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		idx, err := remote.Index(ref, remote.WithContext(ctx))
		if err != nil {
			t.Fatalf("pull index %s: %v", ref, err)
		}
		for _, platform := range []string{"linux/amd64", "linux/arm64"} {
			img, err := ociimage.Image(idx, platform)
			if err != nil {
				t.Fatalf("%s: %v", ref, err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(cf.Config.Entrypoint, " "); got != "/usr/local/bin/"+bin {
				t.Errorf("%s %s: entrypoint %q, want /usr/local/bin/%s", ref, platform, got, bin)
			}
			if cf.Config.User != user {
				t.Errorf("%s %s: user %q, want %q", ref, platform, cf.Config.User, user)
			}
			if want := strings.TrimPrefix(platform, "linux/"); cf.Architecture != want {
				t.Errorf("%s %s: config says %s", ref, platform, cf.Architecture)
			}
			if cf.Config.Labels["org.opencontainers.image.version"] != env.Product.Version {
				t.Errorf("%s %s: version label %q, want %q", ref, platform, cf.Config.Labels["org.opencontainers.image.version"], env.Product.Version)
			}
			if platform != "linux/amd64" {
				continue
			}
			data, err := ociimage.Binary(img, bin)
			if err != nil {
				t.Fatalf("%s: %v", ref, err)
			}
			path := filepath.Join(t.TempDir(), bin)
			if err := os.WriteFile(path, data, 0o755); err != nil {
				t.Fatal(err)
			}
			if bi, err := buildinfo.ReadFile(path); err != nil || buildTags(bi) != "simhost" {
				t.Errorf("%s from %s: build tags %q (%v), want simhost and nothing else", bin, ref, buildTags(bi), err)
			}
			out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
			if err != nil || !strings.Contains(string(out), env.Product.Version) {
				t.Errorf("%s from %s: --version gave %q (%v), want it to name %s", bin, ref, out, err, env.Product.Version)
			}
		}
	}
}

// TestProcessNodePullsLikeAKubelet: a pod whose image does not resolve
// for its node waits in ErrImagePull, then ImagePullBackOff, with the
// registry's message; an arm64 node needs the image's arm64 entry.
func TestProcessNodePullsLikeAKubelet(t *testing.T) {
	ctx := ctxTimeout(t, 2*time.Minute)
	ns := namespace(t)
	arm, err := env.AddProcessNodes(ctx, 1, testbed.NodeSpec{Prefix: "arm", Labels: map[string]string{corev1.LabelArchStable: "arm64"}})
	if err != nil {
		t.Fatal(err)
	}
	amdOnly := env.Registry.Host + "/library/amd64-only:1"
	if err := env.Registry.PushStandIn(ctx, amdOnly, "amd64"); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ pod, node, image, reason, msg string }{
		{"missing", processNode(t).Name(), env.Registry.Host + "/library/no-such-image:1", "ImagePullBackOff", "MANIFEST_UNKNOWN"},
		{"wrong-arch", arm[0].Name(), amdOnly, "ImagePullBackOff", "linux/arm64"},
		{"arm64-ok", arm[0].Name(), env.Product.PauseImage, "", ""},
		{"our-binary-on-arm64", arm[0].Name(), env.Product.Images["npu-hooks"], "", ""},
	}
	for _, c := range cases {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: c.pod, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: c.node, RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: c.image, Args: []string{"--version"}}}},
		}
		if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		err := testbed.WaitFor(ctx, testbed.PodsLW(env.Client, ns, ""), &corev1.Pod{}, func(pods []*corev1.Pod) (bool, error) {
			for _, p := range pods {
				if p.Name != c.pod || len(p.Status.ContainerStatuses) != 1 {
					continue
				}
				st := p.Status.ContainerStatuses[0].State
				if c.reason == "" {
					return st.Running != nil || st.Terminated != nil, nil
				}
				return st.Waiting != nil && st.Waiting.Reason == c.reason && strings.Contains(st.Waiting.Message, c.msg), nil
			}
			return false, nil
		})
		if err != nil {
			got, _ := env.Client.CoreV1().Pods(ns).Get(context.Background(), c.pod, metav1.GetOptions{})
			t.Errorf("pod %s (image %s on %s): want %q mentioning %q: %v; status %+v", c.pod, c.image, c.node, c.reason, c.msg, err, got.Status.ContainerStatuses)
		}
	}
}

// buildTags is the -tags a binary was built with.
func buildTags(bi *buildinfo.BuildInfo) string {
	if bi == nil {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key == "-tags" {
			return s.Value
		}
	}
	return ""
}
