package chartpkg

import (
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
)

func TestPackageForPointsImagesAtTheRelease(t *testing.T) {
	for _, tc := range []struct{ repo, registry, prefix string }{
		{"ghcr.io/openfuyao/npu-stack", "ghcr.io", "openfuyao/npu-stack/"},
		{"127.0.0.1:5000/mirror/npu-stack/", "127.0.0.1:5000", "mirror/npu-stack/"},
		{"registry.example.com", "registry.example.com", ""},
	} {
		tgz, err := PackageFor(chartDir, "1.2.3", tc.repo, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		ch, err := loader.Load(tgz)
		if err != nil {
			t.Fatal(err)
		}
		for key, bin := range ImageKeys {
			img := ch.Values["images"].(map[string]any)[key].(map[string]any)
			if img["registry"] != tc.registry || img["repository"] != tc.prefix+bin || img["tag"] != "" {
				t.Errorf("%s: images.%s = %v", tc.repo, key, img)
			}
		}
		if ch.Values["driver"].(map[string]any)["image"].(map[string]any)["registry"] != "docker.io" {
			t.Errorf("%s: the driver image's registry changed", tc.repo)
		}
	}
	if _, err := PackageFor(chartDir, "1.2.3", "oci://x/y", t.TempDir()); err == nil {
		t.Error("an oci:// images repository was accepted")
	}
}
