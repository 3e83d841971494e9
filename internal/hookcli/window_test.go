package hookcli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/openfuyao/npu-stack/internal/rollout"
)

// The policy flags carry the maintenance windows and the settling delay,
// and a bad window is refused naming the value it came from.
func TestWindowFlags(t *testing.T) {
	parse := func(args ...string) (rollout.Policy, error) {
		var pf policyFlags
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		pf.add(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		p, _, err := pf.parse()
		return p, err
	}
	p, err := parse("--maintenance-window=sat,sun 22:00-04:00 Europe/Berlin wait", "--maintenance-window=wed 01:00-03:00 UTC", "--settle=5m")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Windows.Specs(), "|"); got != "sat,sun 22:00-04:00 Europe/Berlin wait|wed 01:00-03:00 UTC" || p.Settle != 5*time.Minute {
		t.Fatalf("windows %q, settle %s", got, p.Settle)
	}
	if _, err := parse("--maintenance-window=sat 22:00-04:00 Europe/Atlantis"); err == nil ||
		!strings.Contains(err.Error(), "driver.upgradePolicy.maintenanceWindows") || !strings.Contains(err.Error(), `time zone "Europe/Atlantis" is not an IANA time zone name`) {
		t.Fatalf("bad zone: %v", err)
	}
	if _, err := parse("--settle=-1s"); err == nil {
		t.Fatal("a negative settle is refused")
	}
}

// status ends with the window line: open or closed, until when, and who
// waits for it.
func TestPrintStatusShowsTheWindow(t *testing.T) {
	line := "maintenance window: closed until 2026-05-02T22:00:00+02:00 (in 3h5m0s, window sat,sun 22:00-04:00 Europe/Berlin wait); waiting for it: npu-1, npu-2"
	st := rollout.Status{Nodes: []rollout.StatusRow{{Node: "npu-1", State: "upgrade-required"}}, Outcome: rollout.WaitingForWindow,
		Window: &rollout.WindowStatus{Summary: "closed until 2026-05-02T22:00:00+02:00 (in 3h5m0s, window sat,sun 22:00-04:00 Europe/Berlin wait)", Waiting: []string{"npu-1", "npu-2"}}}
	var out bytes.Buffer
	if err := PrintStatus(&out, st, outputTable, "npu-operator"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), line+"\n") || !strings.Contains(out.String(), "(waiting-for-window)") {
		t.Fatalf("status:\n%s\nwant the line\n%s", out.String(), line)
	}
}
