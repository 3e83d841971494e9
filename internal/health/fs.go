package health

import (
	"fmt"
	"os"
)

// mkdirAll creates the marker directory: the chart's hostPath is
// DirectoryOrCreate, but /run is emptied by a reboot and a watch that
// starts first must still be able to watch it.
func mkdirAll(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("marker directory %s: %w", dir, err)
	}
	return nil
}
