package rollout_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// driverRef is a driver image reference in reg for a chip, named as the
// chart's default tagTemplate names it.
func driverRef(reg *testbed.Registry, chip string) string {
	return fmt.Sprintf("%s/alaudadockerhub/ascend-driver:2.0-%s-5.15.0-105-generic-ubuntu22.04", reg.Host, chip)
}

// runImage is a driver image holding the chart's default installer.
var runImage = testbed.StandInDriver{Installer: "/usr/local/Ascend/driver.run"}

// TestPreflightChecksDriverImagesInTheRegistry asks the test bed's real
// registry (CNCF distribution) what a kubelet's pull would find.
func TestPreflightChecksDriverImagesInTheRegistry(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 2*time.Minute)
	reg := env.Registry
	_, sel := preflightFleet(ctx, t, 1, testbed.NodeSpec{})
	fleet := strings.Split(sel, "=")[2]
	if _, err := env.AddNPUNodes(ctx, 1, testbed.NodeSpec{Prefix: "pf-310", Chip: "310p", Labels: map[string]string{fleetLabel: fleet, contract.DefaultDomain + "/driver-version": "1.0"}}); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("2.0-%d", time.Now().UnixNano()%100000)
	ref910, ref310 := strings.Replace(driverRef(reg, "910b"), ":2.0-", ":"+tag+"-", 1), strings.Replace(driverRef(reg, "310p"), ":2.0-", ":"+tag+"-", 1)
	for _, ref := range []string{ref910, ref310} {
		if err := reg.PushStandInDriver(ctx, ref, runImage); err != nil {
			t.Fatal(err)
		}
	}
	args := func(extra ...string) []string {
		return preflightArgs(sel, append([]string{profileArg(t, "910b", "910b", ref910), profileArg(t, "310p", "310p", ref310)}, extra...)...)
	}

	t.Run("every profile's image present", func(t *testing.T) {
		if r := hooks(ctx, t, args()...); r.code != 0 {
			t.Fatalf("both images are in the registry for amd64: %s", r)
		}
	})
	t.Run("one profile's tag deleted", func(t *testing.T) {
		gone := strings.Replace(ref310, tag, tag+"-gone", 1)
		if err := reg.PushStandInDriver(ctx, gone, runImage); err != nil {
			t.Fatal(err)
		}
		if err := reg.DeleteTag(ctx, gone); err != nil {
			t.Fatal(err)
		}
		r := hooks(ctx, t, preflightArgs(sel, profileArg(t, "910b", "910b", ref910), profileArg(t, "310p", "310p", gone))...)
		wantRefusal(t, r, "profile/310p", gone, "not in the registry", "MANIFEST_UNKNOWN",
			"skopeo copy --all docker://docker.io/alaudadockerhub/ascend-driver:"+gone[strings.LastIndex(gone, ":")+1:]+" docker://"+gone)
		if strings.Contains(r.stderr, "profile/910b") {
			t.Errorf("the 910b image is present and must not be reported:\n%s", r.stderr)
		}
	})
	t.Run("image for amd64 only while arm64 NPU nodes exist", func(t *testing.T) {
		amd := strings.Replace(ref910, tag, tag+"-amd64only", 1)
		if err := reg.PushStandInDriver(ctx, amd, runImage, "amd64"); err != nil {
			t.Fatal(err)
		}
		profiles := []string{profileArg(t, "910b", "910b", amd), profileArg(t, "310p", "310p", ref310)}
		if r := hooks(ctx, t, preflightArgs(sel, profiles...)...); r.code != 0 {
			t.Fatalf("amd64 nodes only: an amd64 image is enough: %s", r)
		}
		if _, err := env.AddNPUNodes(ctx, 1, testbed.NodeSpec{Prefix: "pf-arm", Labels: map[string]string{fleetLabel: fleet, corev1.LabelArchStable: "arm64", contract.DefaultDomain + "/driver-version": "1.0"}}); err != nil {
			t.Fatal(err)
		}
		r := hooks(ctx, t, preflightArgs(sel, profiles...)...)
		wantRefusal(t, r, "profile/910b", amd, "linux/arm64", "it has linux/amd64", "skopeo copy --all")
		if strings.Contains(r.stderr, "profile/310p") {
			t.Errorf("the 310p image has both architectures:\n%s", r.stderr)
		}
	})
}

// TestPreflightPrivateRegistry checks a registry that asks for
// credentials (htpasswd), with the pull secret the chart mounts.
func TestPreflightPrivateRegistry(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 2*time.Minute)
	priv, err := testbed.StartRegistry(ctx, env.BinDir, t.TempDir(), testbed.RegistryOptions{Users: map[string]string{"mirror": "s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = priv.Stop() })
	ref := driverRef(priv, "910b")
	if err := priv.PushStandInDriver(ctx, ref, runImage); err != nil {
		t.Fatal(err)
	}
	_, sel := preflightFleet(ctx, t, 1, testbed.NodeSpec{})
	secrets := func(password string) string {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "mirror-pull"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "mirror-pull", ".dockerconfigjson"), priv.DockerConfigJSON("mirror", password), 0o600); err != nil {
			t.Fatal(err)
		}
		return "--pull-secret-dir=" + dir
	}
	if r := hooks(ctx, t, append(preflightArgs(sel, profileArg(t, "910b", "910b", ref)), secrets("s3cret"))...); r.code != 0 {
		t.Fatalf("the chart's pull secret must open the private registry: %s", r)
	}
	r := hooks(ctx, t, append(preflightArgs(sel, profileArg(t, "910b", "910b", ref)), secrets("wrong"))...)
	wantRefusal(t, r, "profile/910b", ref, "refused the credentials", "imagePullSecrets")
	r = hooks(ctx, t, preflightArgs(sel, profileArg(t, "910b", "910b", ref))...)
	wantRefusal(t, r, "profile/910b", ref, "refused the credentials")
}

// TestPreflightRegistryUnreachable: a registry that never answers is a
// clear refusal within the check's timeout, not a hung hook.
func TestPreflightRegistryUnreachable(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, time.Minute)
	// A listener that accepts and never answers: the worst registry.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		var held []net.Conn
		for {
			c, err := l.Accept()
			if err != nil {
				for _, c := range held {
					_ = c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	_, sel := preflightFleet(ctx, t, 1, testbed.NodeSpec{})
	ref := l.Addr().String() + "/alaudadockerhub/ascend-driver:2.0-910b-5.15.0-105-generic-ubuntu22.04"
	start := time.Now()
	r := hooks(ctx, t, preflightArgs(sel, profileArg(t, "910b", "910b", ref), "--image-check-timeout=3s")...)
	wantRefusal(t, r, "profile/910b", ref, "did not answer within 3s", "skipImageCheck")
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("preflight took %s against a silent registry; the 3 s timeout must bound it", took)
	}
	closed := "127.0.0.1:1/alaudadockerhub/ascend-driver:2.0-910b-5.15.0-105-generic-ubuntu22.04"
	r = hooks(ctx, t, preflightArgs(sel, profileArg(t, "910b", "910b", closed))...)
	wantRefusal(t, r, "profile/910b", closed, "unreachable", "connection refused")
}
