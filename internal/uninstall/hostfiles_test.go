package uninstall

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCleanupRequestOnlyFromADeletedAnnotatedDaemonSet(t *testing.T) {
	now := metav1.Now()
	ds := func(deleted bool, ann map[string]string) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "npu-stack-driver-910b", Annotations: ann}}
		if deleted {
			d.DeletionTimestamp = &now
		}
		return d
	}
	req := map[string]string{k.UninstallRequested(): "r1"}
	for _, tc := range []struct {
		name string
		ds   *appsv1.DaemonSet
		want bool
	}{
		{"DaemonSet gone (deleted by helm in the background)", nil, false},
		{"rolling update: the DaemonSet stays", ds(false, req), false},
		{"deleted without a request (helm uninstall alone, a profile renamed)", ds(true, nil), false},
		{"deleted with an empty request", ds(true, map[string]string{k.UninstallRequested(): ""}), false},
		{"deleted by npu-hooks uninstall", ds(true, req), true},
	} {
		got, ok := CleanupRequest(k, tc.ds)
		if ok != tc.want || ok && got != "r1" {
			t.Errorf("%s: request %q %v, want %v", tc.name, got, ok, tc.want)
		}
	}
}

func TestRemoveHostFilesResolvesLinksWithinTheHostRoot(t *testing.T) {
	root := t.TempDir()
	write := func(p string) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// As on most hosts, /var/run is an absolute link to /run: resolved
	// outside the host root it would be this process's own /run.
	if err := os.MkdirAll(filepath.Join(root, "var"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/run", filepath.Join(root, "var", "run")); err != nil {
		t.Fatal(err)
	}
	write("run/cdi/huawei-com-npu.yaml")
	write("run/cdi/other-vendor.yaml")
	write("run/npu-stack/driver-ready")
	write("var/lib/npu-stack/installer/.lock")
	write("etc/kept.yaml")
	// A spec that is a link: the link goes, not what it points to.
	if err := os.Symlink("/etc/kept.yaml", filepath.Join(root, "run", "cdi", "linked.yaml")); err != nil {
		t.Fatal(err)
	}
	files := HostFiles{
		CDISpecs:  []string{"/var/run/cdi/huawei-com-npu.yaml", "/var/run/cdi/linked.yaml", "/var/run/cdi/absent.yaml"},
		MarkerDir: "/run/npu-stack", StateDir: "/var/lib/npu-stack",
	}
	removed, err := RemoveHostFiles(root, files.Paths())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/var/run/cdi/huawei-com-npu.yaml", "/var/run/cdi/linked.yaml", "/run/npu-stack", "/var/lib/npu-stack"}
	if !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	for _, gone := range []string{"run/cdi/huawei-com-npu.yaml", "run/cdi/linked.yaml", "run/npu-stack", "var/lib/npu-stack"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", gone, err)
		}
	}
	for _, kept := range []string{"run/cdi/other-vendor.yaml", "etc/kept.yaml", "var/lib", "run/cdi"} {
		if _, err := os.Lstat(filepath.Join(root, kept)); err != nil {
			t.Errorf("%s removed: %v", kept, err)
		}
	}
	// Run twice: nothing left to remove, no error.
	if again, err := RemoveHostFiles(root, files.Paths()); err != nil || len(again) != 0 {
		t.Errorf("second run removed %q, %v", again, err)
	}
	if _, err := RemoveHostFiles(root, []string{"/", "run/npu-stack"}); err == nil {
		t.Error("/ and a relative path must be refused")
	}
}
