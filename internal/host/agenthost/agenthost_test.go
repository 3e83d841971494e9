package agenthost

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/internal/host"
)

// Without the variable an agent acts on the real machine. With it, a
// test build (tag simhost) acts on the simulated machine in that
// directory, and a release build refuses to start.
func TestSelect(t *testing.T) {
	real := host.NewLinux("/")
	t.Setenv(EnvVar, "")
	if h, err := Select(real); err != nil || h != host.Host(real) {
		t.Fatalf("variable unset: got %T, %v; want the real host", h, err)
	}
	dir := t.TempDir()
	t.Setenv(EnvVar, dir)
	h, err := Select(real)
	if !WithSimulatedHost {
		if err == nil || h != nil || !strings.Contains(err.Error(), EnvVar) || !strings.Contains(err.Error(), "not in this build") {
			t.Fatalf("release build with %s set: got %T, %v; want a refusal naming the variable", EnvVar, h, err)
		}
		return
	}
	if err != nil || h == host.Host(real) || !strings.HasPrefix(h.Path("/run"), dir+string(filepath.Separator)) {
		t.Fatalf("test build with %s set: got %T, %v; want the simulated host in %s", EnvVar, h, err, dir)
	}
}
