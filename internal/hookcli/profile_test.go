package hookcli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/profile"
)

// --profile-dir wraps the API clients built during the run and leaves
// the profiles behind, whether the rollout succeeded or not; the
// rollout's own error is what it returns.
func TestProfiledWritesTheProfilesAndKeepsTheRolloutsError(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	boom := errors.New("rollout failed")
	for _, want := range []error{nil, boom} {
		dir := filepath.Join(t.TempDir(), "prof")
		var client kube.ClientOptions
		wrapped := false
		err := profiled(dir, &client, log, func() error {
			wrapped = client.WrapTransport != nil
			return want
		})
		if !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("profiled returned %v, want %v", err, want)
		}
		if !wrapped {
			t.Error("the API clients are not timed during the run")
		}
		for _, f := range []string{profile.CPUFile, profile.HeapFile, profile.HeapPeakFile, profile.PeakFile} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("after a run returning %v: %v", want, err)
			}
		}
	}
	var client kube.ClientOptions
	if err := profiled("", &client, log, func() error { return nil }); err != nil || client.WrapTransport != nil {
		t.Errorf("no --profile-dir: %v, wrapped %t", err, client.WrapTransport != nil)
	}
}
