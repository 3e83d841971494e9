package procnode

import (
	"slices"
	"testing"
)

func TestBindPodIP(t *testing.T) {
	in := []string{"/bin/npu-rebooter", "run", "--metrics-addr=:9402", "--listen-address=:80", "--metrics-addr=", "--namespace=x", "--dbus-addr=unix:/run"}
	want := []string{"/bin/npu-rebooter", "run", "--metrics-addr=127.0.10.3:9402", "--listen-address=127.0.10.3:80", "--metrics-addr=", "--namespace=x", "--dbus-addr=unix:/run"}
	if got := bindPodIP(in, "127.0.10.3"); !slices.Equal(got, want) {
		t.Errorf("bindPodIP = %q, want %q", got, want)
	}
	if got := bindPodIP(in, ""); !slices.Equal(got, in) {
		t.Errorf("no pod IP changed the args: %q", got)
	}
	// nil is a simulated container (not one of our binaries): it stays nil.
	if got := bindPodIP(nil, "127.0.10.3"); got != nil {
		t.Errorf("a simulated container got args %q", got)
	}
}
