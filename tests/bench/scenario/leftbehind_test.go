package scenario

import (
	"os"
	"path/filepath"
	"testing"
)

// A rollout that ended non-zero passes only if it left behind the wedged
// node and no other.
func TestLeftBehindAcceptsOnlyTheWedgedNode(t *testing.T) {
	for _, tc := range []struct {
		name, log string
		lines     int
		ok        bool
	}{
		{"wedged only", "summary\nleft behind: bench-wedged-9 (driver 1.0.0, want 1.1.0): a recovery reboot is pending\n", 1, true},
		{"another too", "left behind: bench-wedged-9 (x): y\nleft behind: bench-3 (x): NotReady\n", 2, false},
		{"none", "rollout failed: deadline\n", 0, false},
		{"a name with the wedged one as prefix", "left behind: bench-wedged-90 (x): y\n", 1, false},
	} {
		path := filepath.Join(t.TempDir(), "rollout.log")
		if err := os.WriteFile(path, []byte(tc.log), 0o644); err != nil {
			t.Fatal(err)
		}
		lines, ok := leftBehind(path, "bench-wedged-9")
		if len(lines) != tc.lines || ok != tc.ok {
			t.Errorf("%s: %d lines, only the wedged node %v; want %d, %v", tc.name, len(lines), ok, tc.lines, tc.ok)
		}
	}
}
