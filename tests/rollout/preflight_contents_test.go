package rollout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// files is one layer: names relative to the image root.
type files = map[string][]byte

const installer = "usr/local/Ascend/driver.run"

// tree is an installed driver tree at the default image path whose
// version.info names version.
func tree(version string) files {
	return files{
		"usr/local/Ascend/driver/version.info":             []byte("Version=" + version + "\nascendhal_version=7.35.23\n"),
		"usr/local/Ascend/driver/script/specific_func.inc": []byte("# modules\n"),
		"usr/local/Ascend/driver/tools/npu-smi":            []byte("#!/bin/sh\n"),
		"usr/local/Ascend/driver/host/drv_pcie_host.ko":    nil,
	}
}

func without(f files, name string) files {
	out := files{}
	for k, v := range f {
		if k != name {
			out[k] = v
		}
	}
	return out
}

// profileArgMode is profileArg with the profile's installMode.
func profileArgMode(t *testing.T, name, chip, image, mode string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"name": name, "chip": chip, "kernel": "5.15.0-105-generic", "os": "ubuntu22.04", "nodeSelector": map[string]string{}, "image": image, "installMode": mode})
	if err != nil {
		t.Fatal(err)
	}
	return "--profile=" + string(b)
}

// perArch is an index whose linux/<arch> image has the layers of layers[arch].
func perArch(t *testing.T, layers map[string][]files) v1.ImageIndex {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for arch, ls := range layers {
		one, err := testbed.LayeredIndex([]string{arch}, ls...)
		if err != nil {
			t.Fatal(err)
		}
		m, err := one.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		img, err := one.Image(m.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	return idx
}

// TestPreflightReadsDriverImages: preflight reads each driver image's
// layers from the test bed's real registry (CNCF distribution) and
// refuses one that lacks what the profile's install mode needs, naming
// the image, the path and the fix; a later layer's whiteout or opaque
// directory deletes what an earlier one added; a tree's version.info must
// name driver.version.
func TestPreflightReadsDriverImages(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 4*time.Minute)
	reg := env.Registry
	_, sel := preflightFleet(ctx, t, 1, testbed.NodeSpec{})
	tag := fmt.Sprintf("2.0-%d", time.Now().UnixNano()%100000)
	push := func(t *testing.T, name string, layers ...files) string {
		t.Helper()
		ref := fmt.Sprintf("%s/contents/ascend-driver:%s-%s", reg.Host, tag, name)
		idx, err := testbed.LayeredIndex(nil, layers...)
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.PushIndex(ctx, ref, idx); err != nil {
			t.Fatal(err)
		}
		return ref
	}
	runPkg := files{installer: []byte("#!/bin/sh\n")}
	base := files{"etc/os-release": []byte("ID=ubuntu\n"), "usr/local/Ascend/README": []byte("x")}
	for _, tc := range []struct {
		name   string
		mode   string
		layers []files
		extra  []string
		want   []string // nil: passes
	}{
		{name: "run-good", mode: "run", layers: []files{base, runPkg}},
		{name: "run-no-installer", mode: "run", layers: []files{base},
			want: []string{"lacks /usr/local/Ascend/driver.run", `install mode "run"`, "is not in the image", "set driver.installCommand to the vendor package's path in the image", "docs/installation.md"}},
		{name: "run-whiteout", mode: "run", layers: []files{base, runPkg, {"usr/local/Ascend/.wh.driver.run": nil}},
			want: []string{"lacks /usr/local/Ascend/driver.run", "a later layer deletes it"}},
		{name: "run-opaque", mode: "run", layers: []files{runPkg, {"usr/local/Ascend/.wh..wh..opq": nil, "usr/local/Ascend/README": []byte("y")}},
			want: []string{"lacks /usr/local/Ascend/driver.run"}},
		{name: "run-skipped", mode: "run", layers: []files{base}, extra: []string{"--skip-image-content-check"}},
		{name: "tree-good", mode: "tree", layers: []files{base, tree("2.0")}},
		{name: "tree-no-npu-smi", mode: "tree", layers: []files{base, without(tree("2.0"), "usr/local/Ascend/driver/tools/npu-smi")},
			want: []string{"lacks /usr/local/Ascend/driver/tools/npu-smi", `install mode "tree"`, "driver.imageTreePath (/usr/local/Ascend/driver)"}},
		{name: "tree-module-deleted", mode: "tree", layers: []files{base, tree("2.0"), {"usr/local/Ascend/driver/host/.wh.drv_pcie_host.ko": nil}},
			want: []string{"lacks /usr/local/Ascend/driver/host/*.ko", "a later layer deletes it"}},
		{name: "tree-no-module", mode: "tree", layers: []files{base, without(tree("2.0"), "usr/local/Ascend/driver/host/drv_pcie_host.ko"), {"usr/local/Ascend/driver/host/README": nil}},
			want: []string{"lacks /usr/local/Ascend/driver/host/*.ko", "/usr/local/Ascend/driver/host holds no file matching *.ko"}},
		{name: "tree-wrong-version", mode: "tree", layers: []files{base, tree("1.9")},
			want: []string{"holds driver 1.9", "/usr/local/Ascend/driver/version.info: Version=1.9", "not driver.version 2.0", "set driver.version to 1.9"}},
		{name: "tree-version-fixed-above", mode: "tree", layers: []files{tree("1.9"), {"usr/local/Ascend/driver/version.info": []byte("Version=2.0\n")}}},
		{name: "tree-elsewhere", mode: "tree", layers: []files{tree("2.0")}, extra: []string{"--driver-image-tree=/opt/Ascend/driver"},
			want: []string{"lacks /opt/Ascend/driver/version.info", "driver.imageTreePath (/opt/Ascend/driver)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := push(t, tc.name, tc.layers...)
			r := hooks(ctx, t, preflightArgs(sel, append([]string{profileArgMode(t, "910b", "910b", ref, tc.mode)}, tc.extra...)...)...)
			if tc.want == nil {
				if r.code != 0 {
					t.Fatalf("preflight refused a good image: %s", r)
				}
				return
			}
			wantRefusal(t, r, append([]string{"profile/910b: driver image " + ref + " (linux/amd64)"}, tc.want...)...)
		})
	}

	// The installer named as upstream names a package of another version:
	// a warning, not a refusal (upstream does not tie the name to the
	// version.info inside).
	t.Run("run-installer-named-for-another-version", func(t *testing.T) {
		named := "opt/pkg/Ascend-hdk-910b-npu-driver_1.9.0_linux-x86_64.run"
		ref := push(t, "named", files{named: []byte("#!/bin/sh\n")})
		r := hooks(ctx, t, preflightArgs(sel, profileArgMode(t, "910b", "910b", ref, "run"), "--driver-installer=/"+named)...)
		if r.code != 0 || !strings.Contains(r.stdout, "warnings (not refused)") || !strings.Contains(r.stdout, "upstream names version 1.9.0's package") {
			t.Fatalf("want a pass with a warning naming the package's version: %s", r)
		}
	})

	// Every architecture of the profile's nodes is read: an arm64 node
	// makes the arm64 image count.
	t.Run("each-architecture", func(t *testing.T) {
		ref := fmt.Sprintf("%s/contents/ascend-driver:%s-arch", reg.Host, tag)
		if err := reg.PushIndex(ctx, ref, perArch(t, map[string][]files{"amd64": {base, runPkg}, "arm64": {base}})); err != nil {
			t.Fatal(err)
		}
		args := preflightArgs(sel, profileArgMode(t, "910b", "910b", ref, "run"))
		if r := hooks(ctx, t, args...); r.code != 0 {
			t.Fatalf("amd64 nodes only: the amd64 image holds the installer: %s", r)
		}
		fleet := strings.Split(sel, "=")[2]
		if _, err := env.AddNPUNodes(ctx, 1, testbed.NodeSpec{Prefix: "pf-arm", Labels: map[string]string{fleetLabel: fleet, corev1.LabelArchStable: "arm64", contract.DefaultDomain + "/driver-version": "1.0"}}); err != nil {
			t.Fatal(err)
		}
		r := hooks(ctx, t, args...)
		wantRefusal(t, r, "driver image "+ref+" (linux/arm64) lacks /usr/local/Ascend/driver.run")
		if strings.Contains(r.stderr, "(linux/amd64) lacks") {
			t.Errorf("the amd64 image holds the installer:\n%s", r.stderr)
		}
	})
}

// The test bed's stand-in driver images (what Helm installs mirror, as
// an admin copies the vendor's) hold what preflight reads for, in both
// install modes, at the paths the chart renders.
func TestMirroredStandInsPassPreflight(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 2*time.Minute)
	_, sel := preflightFleet(ctx, t, 1, testbed.NodeSpec{})
	rel, err := env.Helm("npu-operator").Render(ctx, "mirror", map[string]any{"driver": map[string]any{
		"version":        "2.0",
		"installCommand": []any{"/opt/pkg/driver.run", "--full", "--quiet"},
		"imageTreePath":  "/opt/Ascend/driver",
		"profiles": []any{
			map[string]any{"name": "run", "chip": "910b", "kernel": "5.15.0-105-generic", "os": "ubuntu22.04"},
			map[string]any{"name": "tree", "chip": "310p", "kernel": "5.15.0-105-generic", "os": "ubuntu22.04", "installMode": "tree", "hostDriverPath": "/var/lib/Ascend/driver"},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	standIns := testbed.DriverStandIns(rel)
	if len(standIns) != 2 {
		t.Fatalf("stand-ins %v, want one per profile", standIns)
	}
	tag := fmt.Sprintf("-%d", time.Now().UnixNano()%100000)
	for ref, d := range standIns {
		if d.Version != "2.0" || d.Installer != "/opt/pkg/driver.run" || d.Tree != "/opt/Ascend/driver" {
			t.Errorf("stand-in of %s: %+v", ref, d)
		}
		mode := "run"
		if strings.Contains(ref, "-310p-") {
			mode = "tree"
		}
		mirrored := strings.Replace(ref, "docker.io/", env.Registry.Host+"/", 1) + tag
		if err := env.Registry.PushStandInDriver(ctx, mirrored, d); err != nil {
			t.Fatal(err)
		}
		if r := hooks(ctx, t, preflightArgs(sel, profileArgMode(t, "910b", "910b", mirrored, mode), "--driver-installer=/opt/pkg/driver.run", "--driver-image-tree=/opt/Ascend/driver")...); r.code != 0 {
			t.Errorf("the stand-in for %s (%s) refused: %s", ref, mode, r)
		}
	}
}

// TestPreflightContentTimeout: an image whose layers cannot be read in
// time is refused, naming the timeout's value and the switch, not a hung
// hook. The registry answers the manifest but never sends a layer.
func TestPreflightContentTimeout(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 2*time.Minute)
	_, sel := preflightFleet(ctx, t, 1, testbed.NodeSpec{})
	ref, stop := stallingRegistry(ctx, t)
	defer stop()
	r := hooks(ctx, t, preflightArgs(sel, profileArgMode(t, "910b", "910b", ref, "run"), "--image-content-timeout=2s")...)
	wantRefusal(t, r, "profile/910b", ref, "were not read within 2s", "hooks.preflight.imageContentTimeoutSeconds", "skipImageContentCheck")
}

// stallingRegistry is a registry (go-containerregistry's pkg/registry)
// holding a run-mode driver image, that serves its manifests and config
// but holds every request for a layer open until stop.
func stallingRegistry(ctx context.Context, t *testing.T) (ref string, stop func()) {
	t.Helper()
	idx, err := testbed.LayeredIndex(nil, files{installer: []byte("#!/bin/sh\n")})
	if err != nil {
		t.Fatal(err)
	}
	layers := map[string]bool{} // digests
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		ls, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			dg, err := l.Digest()
			if err != nil {
				t.Fatal(err)
			}
			layers[dg.String()] = true
		}
	}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") && layers[path.Base(r.URL.Path)] {
			select {
			case <-r.Context().Done():
			case <-done:
			}
			return
		}
		inner.ServeHTTP(w, r)
	}))
	ref = strings.TrimPrefix(srv.URL, "http://") + "/contents/ascend-driver:2.0-stalled"
	tag, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	return ref, func() { close(done); srv.Close() }
}
