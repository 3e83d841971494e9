//go:build !simhost

package healthwatch

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/internal/host/agenthost"
)

// A release build refuses the test bed's variable instead of acting on
// the real machine as if it were the simulated one: install-binary
// writes nothing.
func TestReleaseBuildRefusesTheSimulatedHost(t *testing.T) {
	t.Setenv(agenthost.EnvVar, t.TempDir())
	to := t.TempDir()
	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"install-binary", "--to=" + to, "--log-level=error"})
	err := root.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), agenthost.EnvVar) || !strings.Contains(err.Error(), "not in this build") {
		t.Fatalf("install-binary with %s set: %v; want a refusal naming the variable", agenthost.EnvVar, err)
	}
	if entries, _ := os.ReadDir(to); len(entries) != 0 {
		t.Errorf("install-binary wrote %d entries to %s despite refusing", len(entries), to)
	}
}
