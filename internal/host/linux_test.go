package host

import (
	"testing"
	"time"
)

func TestParseProcUptime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"350735.47 234388.90\n", 350735470 * time.Millisecond, true},
		{"0.50 0.10", 500 * time.Millisecond, true},
		{"", 0, false},
		{"abc 1", 0, false},
		{"-1 0", 0, false},
	} {
		got, err := parseProcUptime(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseProcUptime(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseRebootMethod(t *testing.T) {
	for in, want := range map[string]RebootMethod{
		"systemd":   RebootSystemd,
		"sysrq":     RebootSysrq,
		"systemctl": RebootSystemd, // the old name, kept as an alias
	} {
		if m, err := ParseRebootMethod(in); err != nil || m != want {
			t.Errorf("ParseRebootMethod(%q) = %q, %v; want %q", in, m, err, want)
		}
	}
	for _, in := range []string{"reboot -f", "", "Systemd"} {
		if _, err := ParseRebootMethod(in); err == nil {
			t.Errorf("accepted unknown reboot method %q", in)
		}
	}
}
