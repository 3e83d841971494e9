package rebootercli

import (
	"io"
	"strings"
	"testing"
)

// A recovery window the rebooter cannot judge stops it at start, naming
// the value it came from, before it touches the cluster.
func TestRunRefusesABadRecoveryWindow(t *testing.T) {
	for _, tc := range []struct{ window, want string }{
		{"sat 22:00-04:00 Mars/Olympus_Mons", `time zone "Mars/Olympus_Mons" is not an IANA time zone name`},
		{"saturday 22:00-04:00 UTC", `unknown day "saturday"`},
		{"sat 22:00-22:00 UTC", "start and end are both 22:00"},
	} {
		root := NewRoot()
		root.SetArgs([]string{"run", "--node-name=n", "--namespace=ns", "--recovery-window=" + tc.window})
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), "--recovery-window (recoveryPolicy.maintenanceWindows)") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--recovery-window=%q: %v; want a refusal naming the value and %q", tc.window, err, tc.want)
		}
	}
}
