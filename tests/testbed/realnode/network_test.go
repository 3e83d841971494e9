package realnode

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// TestDeleteVethIsIdempotent: a node's veth that the kernel already
// removed (with the network namespace of its other end) is no teardown
// error, whether it went before the delete or is deleted twice; one that
// exists is removed.
func TestDeleteVethIsIdempotent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("creates network interfaces: needs root, as the real nodes and make test do (ci/prereqs.sh); run it as root")
	}
	name := fmt.Sprintf("rnt%d", os.Getpid()%100000)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("link", "add", name, "type", "veth", "peer", "name", name+"p")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", name).Run() })
	nn := nodeNet{vethName: name}

	if err := nn.deleteVeth(); err != nil {
		t.Fatalf("an existing veth: %v", err)
	}
	if linkExists(name) {
		t.Fatalf("%s still exists after deleteVeth", name)
	}
	if err := nn.deleteVeth(); err != nil {
		t.Fatalf("a second delete: %v", err)
	}
	// Removed first by someone else (here the peer's end: the pair goes).
	ip("link", "add", name, "type", "veth", "peer", "name", name+"p")
	ip("link", "del", name+"p")
	if err := nn.deleteVeth(); err != nil {
		t.Fatalf("a veth the kernel already removed: %v", err)
	}
}
