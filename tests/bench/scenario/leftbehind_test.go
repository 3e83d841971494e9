package scenario

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"
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

// The decision count is read from the rollout's closing line in either
// of logrus's formats, as npu-hooks writes it.
func TestDecisionPassesFromEitherLogFormat(t *testing.T) {
	for name, f := range map[string]logrus.Formatter{"text": &logrus.TextFormatter{DisableColors: true}, "json": &logrus.JSONFormatter{}} {
		var buf bytes.Buffer
		log := logrus.New()
		log.SetOutput(&buf)
		log.SetFormatter(f)
		log.WithField("decisionPasses", int64(4711)).Info("rollout decisions made")
		path := filepath.Join(t.TempDir(), "rollout.log")
		if err := os.WriteFile(path, append([]byte("rollout finished: 10/10\n"), buf.Bytes()...), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := decisionPasses(path); got != 4711 {
			t.Errorf("%s: %d passes, want 4711 from %q", name, got, buf.String())
		}
	}
	if got := decisionPasses(filepath.Join(t.TempDir(), "missing.log")); got != 0 {
		t.Errorf("no log: %d passes, want 0", got)
	}
}
