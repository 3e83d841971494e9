package scenario

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/internal/profile"
	"github.com/openfuyao/npu-stack/tests/bench/report"
)

// The scenario takes its peaks and API time from the rollout's peak.json
// and names every profile file; a file missing fails the scenario rather
// than leaving a figure at zero.
func TestReadProfileFromTheRolloutsFiles(t *testing.T) {
	dir := t.TempDir()
	js, err := json.Marshal(profile.Peaks{Goroutines: profile.Peak{Value: 412}, HeapInUse: profile.Peak{Value: 64 << 20},
		API: profile.APIWait{Requests: 9000, Seconds: 45.5, Watches: 6}})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(profile.PeakFile, js)
	write(profile.CPUFile, nil)
	write(profile.HeapPeakFile, nil)
	var s report.Scenario
	if err := readProfile(&s, dir); err == nil || !strings.Contains(err.Error(), profile.HeapFile) {
		t.Fatalf("without %s: %v, want an error naming it", profile.HeapFile, err)
	}
	write(profile.HeapFile, nil)
	if err := readProfile(&s, dir); err != nil {
		t.Fatal(err)
	}
	if s.RolloutPeakGoroutines != 412 || s.RolloutPeakHeapMB != 64 || s.RolloutAPIRequests != 9000 || s.RolloutAPIWait != 45.5 || len(s.RolloutProfiles) != 4 {
		t.Errorf("scenario %+v: want 412 goroutines, 64 MiB, 9000 requests in 45.5 s and the 4 files", s)
	}
	if got := cpuPerNodeMs(4.2, 1000); got < 4.2-1e-9 || got > 4.2+1e-9 {
		t.Errorf("4.2 s over 1,000 nodes: %.3f ms, want 4.2", got)
	}
	if got := cpuPerNodeMs(4.2, 0); got != 0 {
		t.Errorf("no node upgraded: %.3f ms, want 0", got)
	}
}
