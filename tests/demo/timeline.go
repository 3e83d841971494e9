package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// timeline draws the rollout the story just ran with `npu-hooks timeline`
// (the newest rollout record) into OutDir and prints the picture's path.
func (s *Story) timeline(ctx context.Context, story string) error {
	if s.OutDir == "" {
		return nil
	}
	if err := os.MkdirAll(s.OutDir, 0o755); err != nil {
		return fmt.Errorf("demo output directory %s: %w", s.OutDir, err)
	}
	path, err := filepath.Abs(filepath.Join(s.OutDir, "timeline-"+story+".svg"))
	if err != nil {
		return err
	}
	if err := s.shell(ctx, fmt.Sprintf("npu-hooks timeline --namespace %s -o %s", s.Namespace, path)); err != nil {
		return err
	}
	s.printf("   picture of the rollout: %s\n", path)
	return nil
}
