package host

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Sysrq is how a sysrq reboot reaches the kernel: its /proc and sync(2).
// Tests hand in a directory and a recording Sync; production uses /proc
// of this container (the kernel's, shared by every container) and the
// real sync(2).
type Sysrq struct {
	// Proc is where /proc is mounted; empty means /proc.
	Proc string
	// Sync flushes every filesystem; nil means syscall.Sync.
	Sync func()
}

// sysrqKeys are written to /proc/sysrq-trigger in this order: 's' syncs
// and 'u' remounts every filesystem read-only, then 'b' reboots "without
// syncing or unmounting your disks" (Linux
// Documentation/admin-guide/sysrq.rst, "Command" table). 's' and 'u' are
// only queued to a kernel worker, so sync(2), which returns once the data
// is written, comes first.
var sysrqKeys = []string{"s", "u", "b"}

// Reboot syncs, remounts read-only and reboots the kernel at once.
func (s *Sysrq) Reboot() error {
	proc, sync := "/proc", syscall.Sync
	if s != nil && s.Proc != "" {
		proc = s.Proc
	}
	if s != nil && s.Sync != nil {
		sync = s.Sync
	}
	// 1 enables every sysrq function; a kernel default such as 176 or 438
	// may leave out remount or sync (sysrq.rst, "How do I enable").
	if err := os.WriteFile(filepath.Join(proc, "sys/kernel/sysrq"), []byte("1"), 0); err != nil {
		return fmt.Errorf("enable sysrq: %w", err)
	}
	sync()
	for _, k := range sysrqKeys {
		if err := os.WriteFile(filepath.Join(proc, "sysrq-trigger"), []byte(k), 0); err != nil {
			return fmt.Errorf("sysrq %q: %w", k, err)
		}
	}
	return nil
}
