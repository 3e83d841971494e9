package testbed

import (
	"net"
	"testing"
)

// FreePort is a TCP port nothing listens on now, on any address (so on
// loopback too): for an agent's metrics port that a test scrapes. It is
// released at once; a collision makes the agent fail to bind, loudly.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatalf("reserve a port: %v", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
