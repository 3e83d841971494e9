package standin

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLoadDriver needs root (mknod), as CI runs the tests.
func TestLoadDriver(t *testing.T) {
	root := t.TempDir()
	at := func(p string) string { return filepath.Join(root, p) }
	c := NewChips(Model310P, 2)
	if err := LoadDriver(at, LoadedModules, c, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(at("/sys/module/drv_pcie_host")); err != nil {
		t.Error(err)
	}
	for _, d := range []string{"davinci0", "davinci1", "davinci_manager", "devmm_svm", "hisi_hdc"} {
		var st unix.Stat_t
		if err := unix.Stat(at("/dev/"+d), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Mode&0o777 != 0o666 || unix.Major(st.Rdev) != 1 || unix.Minor(st.Rdev) != 3 {
			t.Errorf("/dev/%s: mode %o rdev %d:%d, want a 0666 character device 1:3", d, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
	}
	if _, err := os.Stat(at("/dev/davinci2")); !os.IsNotExist(err) {
		t.Errorf("/dev/davinci2 for 2 chips: %v", err)
	}
	if _, err := os.Stat(at(DevChipsFile)); err != nil {
		t.Error(err)
	}
	// Loading again (a second boot) keeps the nodes.
	if err := LoadDriver(at, LoadedModules, c, 0o660); err != nil {
		t.Fatal(err)
	}
}
