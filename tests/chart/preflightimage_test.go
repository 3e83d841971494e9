package chart_test

import (
	"testing"
)

// Preflight learns each profile's install mode (run unless the profile
// says tree) and where the image holds the installer and the tree, so it
// can read the image for them; the layer reading has its own timeout and
// switch.
func TestPreflightKnowsWhatEachImageMustHold(t *testing.T) {
	args := func(vals map[string]any) []string {
		r := mustRender(t, variant{name: "preflight", vals: vals})
		return strs(podSpec(t, r.find("Job", "npu-stack-preflight"))["containers"].([]any)[0].(map[string]any)["args"])
	}
	def := args(nil)
	for _, want := range []string{
		`--profile={"chip":"910b","image":"docker.io/alaudadockerhub/ascend-driver:25.5.0-910b-5.15.0-105-generic-ubuntu22.04","installMode":"run","kernel":"5.15.0-105-generic","name":"910b","nodeSelector":{},"os":"ubuntu22.04"}`,
		"--driver-installer=/usr/local/Ascend/driver.run",
		"--driver-image-tree=/usr/local/Ascend/driver",
		"--skip-image-content-check=false",
		"--image-content-timeout=180s",
	} {
		if !hasArg(def, want) {
			t.Errorf("default preflight args %q lack %s", def, want)
		}
	}
	got := args(map[string]any{
		"driver": map[string]any{
			"installCommand": []any{"/opt/pkg/Ascend-hdk-910b-npu-driver_25.5.0_linux-aarch64.run", "--full", "--quiet"},
			"imageTreePath":  "/opt/Ascend/driver",
			"profiles": []any{
				map[string]any{"name": "kubeos", "chip": "910b", "kernel": "6.6.0-145.0.4.135.oe2403sp3.aarch64", "os": "oe2403sp3", "installMode": "tree", "hostDriverPath": "/var/lib/Ascend/driver"},
				map[string]any{"name": "plain", "chip": "910b", "kernel": "5.15.0-105-generic", "os": "ubuntu22.04", "installMode": "run"},
			},
		},
		"hooks": map[string]any{"preflight": map[string]any{"skipImageContentCheck": true, "imageContentTimeoutSeconds": 600}},
	})
	for _, want := range []string{
		`--profile={"chip":"910b","image":"docker.io/alaudadockerhub/ascend-driver:25.5.0-910b-6.6.0-145.0.4.135.oe2403sp3.aarch64-oe2403sp3","installMode":"tree","kernel":"6.6.0-145.0.4.135.oe2403sp3.aarch64","name":"kubeos","nodeSelector":{},"os":"oe2403sp3"}`,
		`--profile={"chip":"910b","image":"docker.io/alaudadockerhub/ascend-driver:25.5.0-910b-5.15.0-105-generic-ubuntu22.04","installMode":"run","kernel":"5.15.0-105-generic","name":"plain","nodeSelector":{},"os":"ubuntu22.04"}`,
		"--driver-installer=/opt/pkg/Ascend-hdk-910b-npu-driver_25.5.0_linux-aarch64.run",
		"--driver-image-tree=/opt/Ascend/driver",
		"--skip-image-content-check=true",
		"--image-content-timeout=600s",
	} {
		if !hasArg(got, want) {
			t.Errorf("preflight args %q lack %s", got, want)
		}
	}
	for _, bad := range []map[string]any{
		{"driver": map[string]any{"profiles": []any{map[string]any{"name": "a", "chip": "910b", "kernel": "k", "os": "o", "installMode": "copy"}}}},
		{"driver": map[string]any{"imageTreePath": "relative/driver"}},
		{"hooks": map[string]any{"preflight": map[string]any{"imageContentTimeoutSeconds": 0}}},
	} {
		if _, err := render(t, bad, renderOpts{}); err == nil {
			t.Errorf("values %v rendered; the schema must refuse them", bad)
		}
	}
}
