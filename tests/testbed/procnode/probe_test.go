package procnode

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestProbeArgvRunsOnlyOurBinaries(t *testing.T) {
	env := map[string]string{"DIR": "/run/npu-stack"}
	exec := func(cmd ...string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: cmd}}}
	}
	got := probeArgv("/bin", exec("/opt/npu-stack/bin/npu-healthwatch", "validate", "--marker-only", "--marker-dir=$(DIR)"), env)
	if want := []string{"/bin/npu-healthwatch", "validate", "--marker-only", "--marker-dir=/run/npu-stack"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("probeArgv = %q, want %q", got, want)
	}
	for name, p := range map[string]*corev1.Probe{
		"none":        nil,
		"vendor exec": exec("/usr/local/bin/npu-smi", "info"),
		"empty exec":  exec(),
		"http":        {ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}},
	} {
		if got := probeArgv("/bin", p, env); got != nil {
			t.Errorf("%s: probeArgv = %q, want nil (treated as passing)", name, got)
		}
	}
}

func TestRunProbe(t *testing.T) {
	if !runProbe([]string{"true"}, nil, t.TempDir(), time.Minute) {
		t.Error("exit 0 is not a success")
	}
	if runProbe([]string{"false"}, nil, t.TempDir(), time.Minute) {
		t.Error("exit 1 is a success")
	}
	if runProbe([]string{"sleep", "60"}, nil, t.TempDir(), 10*time.Millisecond) {
		t.Error("a probe past its timeout is a success")
	}
	if runProbe([]string{"/no/such/binary"}, nil, t.TempDir(), time.Minute) {
		t.Error("a probe that cannot start is a success")
	}
}
