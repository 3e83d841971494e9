package preflight

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/openfuyao/npu-stack/internal/contract"
)

var (
	keys = contract.Keys{Domain: contract.DefaultDomain}
	pl   = ProfileLabels{Chip: contract.LabelChip, Kernel: contract.LabelKernel, OS: contract.LabelOS}
)

func node(name, chip, loaded string, cordoned, ready bool) *corev1.Node {
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			contract.LabelChip: chip, contract.LabelKernel: "k1", contract.LabelOS: "os1", keys.DriverVersion(): loaded}},
		Spec:   corev1.NodeSpec{Unschedulable: cordoned},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}},
	}
}

// images maps an image to the architectures it offers.
type images map[string][]string

func (im images) Check(_ context.Context, image string, archs []string) error {
	have, ok := im[image]
	if !ok {
		return &transport.Error{StatusCode: http.StatusNotFound, Errors: []transport.Diagnostic{{Code: transport.ManifestUnknownErrorCode, Message: "manifest unknown"}}}
	}
	for _, a := range archs {
		if !slices.Contains(have, a) {
			return fmt.Errorf("%w: it has %v, the nodes need %s", ErrMissingArch, have, a)
		}
	}
	return nil
}

func input(nodes ...*corev1.Node) Input {
	return Input{Keys: keys, DriverEnabled: true, DriverVersion: "2.0", ProfileLabels: pl,
		Profiles: []Profile{{Name: "a", Chip: "910b", Kernel: "k1", OS: "os1", Image: "reg/drv:a"}, {Name: "b", Chip: "310p", Kernel: "k1", OS: "os1", Image: "reg/drv:b"}},
		Nodes:    nodes, MaxUnavailable: intstr.FromString("50%"), Images: images{"reg/drv:a": {"amd64", "arm64"}, "reg/drv:b": {"amd64", "arm64"}}}
}

func problems(t *testing.T, in Input) string {
	t.Helper()
	r, err := Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range r.Problems {
		out = append(out, p.String())
	}
	return strings.Join(out, "\n")
}

func TestRun(t *testing.T) {
	ok := []*corev1.Node{node("n1", "910b", "1.0", false, true), node("n2", "310p", "1.0", false, true)}
	if p := problems(t, input(ok...)); p != "" {
		t.Fatalf("healthy fleet refused:\n%s", p)
	}
	for name, tc := range map[string]struct {
		in   Input
		want []string
	}{
		"uncovered": {input(node("n1", "910b", "1.0", false, true), node("odd", "tpu", "1.0", false, true)), []string{"node/odd", `openfuyao.com/npu.chip="tpu"`, "driver.profiles"}},
		"profile kernel in the image tag's form": {func() Input {
			oe := node("oe", "910b", "1.0", false, true)
			oe.Labels[contract.LabelKernel] = "k1.oe2403sp3.aarch64"
			return input(node("n1", "910b", "1.0", false, true), oe)
		}(), []string{"node/oe", `profile a has kernel "k1"`, `imageKernel to "k1"`}},
		"overlap": {func() Input {
			in := input(ok...)
			in.Profiles = append(in.Profiles, Profile{Name: "c", Chip: "910b", Kernel: "k1", OS: "os1"})
			return in
		}(), []string{"node/n1", "several driver profiles (a, c)"}},
		"image missing": {func() Input {
			in := input(ok...)
			in.Images = images{"reg/drv:a": {"amd64"}}
			return in
		}(), []string{"profile/b", "reg/drv:b", "MANIFEST_UNKNOWN", "not in the registry", "skopeo copy --all docker://docker.io/alaudadockerhub/ascend-driver:b docker://reg/drv:b"}},
		"image without the nodes' architecture": {func() Input {
			arm := node("n1", "910b", "1.0", false, true)
			arm.Labels[corev1.LabelArchStable] = "arm64"
			in := input(arm, node("n2", "310p", "1.0", false, true))
			in.Images = images{"reg/drv:a": {"amd64"}, "reg/drv:b": {"amd64"}}
			return in
		}(), []string{"profile/a", "reg/drv:a", "arm64", "cannot run on this profile's nodes", "skopeo copy --all"}},
		"budget spent": {func() Input {
			in := input(node("n1", "910b", "1.0", false, true), node("n2", "910b", "1.0", true, true), node("n3", "910b", "1.0", false, false), node("n4", "910b", "1.0", false, true))
			return in
		}(), []string{"policy/maxUnavailable", "allows 2 of 4", "(n2, n3)"}},
		"not evictable": {func() Input {
			in := input(ok...)
			in.Evictable = func(_ context.Context, n string) error {
				if n == "n2" {
					return errors.New("pod ml/x is unmanaged")
				}
				return nil
			}
			return in
		}(), []string{"node/n2", "NPU workloads cannot be stopped", "ml/x"}},
	} {
		t.Run(name, func(t *testing.T) {
			p := problems(t, tc.in)
			for _, w := range tc.want {
				if !strings.Contains(p, w) {
					t.Errorf("problems must mention %q:\n%s", w, p)
				}
			}
		})
	}
	// A rerun while the rollout has nodes in flight (cordoned by it) is
	// not refused for the budget those nodes hold.
	inFlight := node("n2", "910b", "1.0", true, true)
	inFlight.Labels[keys.UpgradeState()] = string(contract.StateRebootRequired)
	rerun := input(node("n1", "910b", "1.0", false, true), inFlight, node("n3", "910b", "1.0", false, true), node("n4", "910b", "1.0", false, true))
	rerun.MaxUnavailable = intstr.FromInt32(1)
	if p := problems(t, rerun); p != "" {
		t.Fatalf("in-flight nodes must not count as a spent budget:\n%s", p)
	}
	// Up-to-date, skipped and unreported nodes are not upgraded: no
	// budget or eviction check applies to them.
	skipped := node("n3", "910b", "1.0", false, true)
	skipped.Labels[keys.UpgradeSkip()] = "true"
	in := input(node("n1", "910b", "2.0", true, true), node("n2", "910b", "", true, true), skipped)
	in.Evictable = func(context.Context, string) error { return errors.New("must not be asked") }
	if p := problems(t, in); p != "" {
		t.Fatalf("nothing to upgrade, nothing to refuse:\n%s", p)
	}
	in.DriverEnabled = false
	in.Nodes = append(in.Nodes, node("odd", "tpu", "", false, true))
	if p := problems(t, in); p != "" {
		t.Fatalf("a passthrough driver has nothing to check:\n%s", p)
	}
}

func TestParseProfile(t *testing.T) {
	p, err := ParseProfile(`{"name":"a","chip":"910b","kernel":"k","os":"o","nodeSelector":{"x":"y"},"image":"r/i:t"}`)
	if err != nil || p.NodeSelector["x"] != "y" || p.Image != "r/i:t" {
		t.Fatalf("%+v %v", p, err)
	}
	if p, err := ParseProfile(`{"name":"a","chip":"910b","kernel":"k","os":"o","installMode":"tree"}`); err != nil || p.InstallMode != "tree" {
		t.Fatalf("%+v %v", p, err)
	}
	for _, bad := range []string{`{`, `{"name":"a"}`, `{"name":"a","chip":"c","kernel":"k","os":"o","extra":1}`, `{"name":"a","chip":"c","kernel":"k","os":"o","installMode":"copy"}`} {
		if _, err := ParseProfile(bad); err == nil {
			t.Errorf("ParseProfile(%s) accepted", bad)
		}
	}
}

func TestLoadPullSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(secret, body string) {
		if err := os.MkdirAll(filepath.Join(dir, secret), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, secret, ".dockerconfigjson"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	auth := base64.StdEncoding.EncodeToString([]byte("robot:s3cret"))
	write("regcred", `{"auths":{"https://swr.example.com/v2/":{"auth":"`+auth+`"},"other.example.com:5000":{"username":"u","password":"p"}}}`)
	kc, err := LoadPullSecrets(dir)
	if err != nil {
		t.Fatal(err)
	}
	for reg, user := range map[string]string{"swr.example.com": "robot", "other.example.com:5000": "u"} {
		r, err := name.NewRegistry(reg)
		if err != nil {
			t.Fatal(err)
		}
		a, err := kc.Resolve(r)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := authn.Authorization(context.Background(), a)
		if err != nil || cfg.Username != user {
			t.Errorf("%s: user %q (%v), want %q", reg, cfg.Username, err, user)
		}
	}
	write("broken", `{"auths":{"x":{"auth":"not-base64!"}}}`)
	if _, err := LoadPullSecrets(dir); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("a malformed secret must be named: %v", err)
	}
	if _, err := LoadPullSecrets(filepath.Join(dir, "absent")); err != nil {
		t.Fatalf("no secrets mounted is fine: %v", err)
	}
}
