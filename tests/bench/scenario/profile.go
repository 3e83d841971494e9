package scenario

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/openfuyao/npu-stack/internal/profile"
	"github.com/openfuyao/npu-stack/tests/bench/procstat"
	"github.com/openfuyao/npu-stack/tests/bench/report"
)

// profileArg makes the rollout keep its profiles in dir
// (`npu-hooks rollout --profile-dir`), beside its log.
func profileArg(dir string) string { return "--profile-dir=" + dir }

// readProfile fills the scenario's figures from the profiles the rollout
// wrote to dir: its peaks and its time on the API server from peak.json,
// and the files' paths, so the report points at the profiles behind its
// figures. A missing file is an error: the figures would be estimates.
func readProfile(s *report.Scenario, dir string) error {
	p, err := profile.ReadPeaks(filepath.Join(dir, profile.PeakFile))
	if err != nil {
		return fmt.Errorf("the rollout's profiles: %w", err)
	}
	s.RolloutProfiles = nil
	for _, f := range []string{profile.CPUFile, profile.HeapFile, profile.HeapPeakFile, profile.PeakFile} {
		path := filepath.Join(dir, f)
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("the rollout's profiles: %w", err)
		}
		s.RolloutProfiles = append(s.RolloutProfiles, path)
	}
	s.RolloutPeakGoroutines = int(p.Goroutines.Value)
	s.RolloutPeakHeapMB = procstat.MiB(int64(p.HeapInUse.Value))
	s.RolloutAPIRequests = int(p.API.Requests)
	s.RolloutAPIWait = report.Seconds(p.API.Seconds)
	return nil
}

// cpuPerNodeMs is the rollout's CPU time per node upgraded, in
// milliseconds (0 when none was).
func cpuPerNodeMs(cpu report.Seconds, upgraded int) float64 {
	if upgraded <= 0 {
		return 0
	}
	return float64(cpu) * 1000 / float64(upgraded)
}
