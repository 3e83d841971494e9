package host

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// The sysrq reboot syncs before it reboots: sync(2), then 's' and 'u',
// and 'b' last. The trigger is a FIFO read by the test, so every write
// is seen in order, as the kernel sees them.
func TestSysrqSyncsBeforeReboot(t *testing.T) {
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "sys/kernel"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "sys/kernel/sysrq"), []byte("176"), 0o644); err != nil {
		t.Fatal(err)
	}
	trigger := filepath.Join(proc, "sysrq-trigger")
	if err := syscall.Mkfifo(trigger, 0o600); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		seq []string
	)
	note := func(s string) { mu.Lock(); seq = append(seq, s); mu.Unlock() }
	// Held open read-write for the whole test: a writer never waits for
	// a reader and no key is lost between two writes.
	fifo, err := os.OpenFile(trigger, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = fifo.Close() }()
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 1)
		for range sysrqKeys {
			if _, err := io.ReadFull(fifo, b); err != nil {
				return
			}
			note("key " + string(b))
		}
	}()
	l := NewLinux("/")
	l.Sysrq = &Sysrq{Proc: proc, Sync: func() { note("sync(2)") }}
	if err := l.Reboot(context.Background(), RebootSysrq); err != nil {
		t.Fatal(err)
	}
	<-done
	if got, want := strings.Join(seq, ", "), "sync(2), key s, key u, key b"; got != want {
		t.Errorf("sysrq reboot did %s; want %s", got, want)
	}
	if b, _ := os.ReadFile(filepath.Join(proc, "sys/kernel/sysrq")); string(b) != "1" {
		t.Errorf("sysrq mask %q, want 1 (every function, sync and remount included)", b)
	}
}
