// Command insmod stands for kmod's insmod on a test-bed node with a
// read-only root. There is no Ascend kernel driver here, so it stands for
// the kernel too: it refuses, with insmod's words (kmod tools/insmod.c:
// "insmod: ERROR: could not load module %s: %s" when the file cannot be
// read, "could not insert module %s: %s" with mod_strerror otherwise),
// what the kernel refuses: a file that is no module or built for another
// kernel (ENOEXEC, "Invalid module format"), a module already loaded
// (EEXIST, "File exists"), one whose dependencies are not loaded
// (ENOENT, "Unknown symbol in module"). A loaded module is a directory in
// /sys/module, and drv_pcie_host brings the chips' device nodes up
// (standin.LoadDriver).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/openfuyao/npu-stack/tests/testbed/standin"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "insmod: ERROR: "+format+"\n", args...)
	return 1
}

func run(args []string) int {
	var files []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			files = append(files, a)
		}
	}
	if len(files) == 0 {
		return fail("missing filename.")
	}
	file := files[0]
	b, err := os.ReadFile(file)
	if err != nil {
		var errno unix.Errno
		if !errors.As(err, &errno) {
			errno = unix.EIO
		}
		return fail("could not load module %s: %s", file, errno.Error())
	}
	m, err := standin.ParseModule(b)
	if err != nil {
		return fail("could not insert module %s: Invalid module format", file)
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return fail("uname: %v", err)
	}
	release := unix.ByteSliceToString(uts.Release[:])
	if strings.Fields(m.Vermagic)[0] != release {
		return fail("could not insert module %s: Invalid module format", file)
	}
	if _, err := os.Stat(filepath.Join("/sys/module", m.Name)); err == nil {
		return fail("could not insert module %s: File exists", file)
	}
	for _, dep := range m.Depends {
		if _, err := os.Stat(filepath.Join("/sys/module", dep)); errors.Is(err, fs.ErrNotExist) {
			return fail("could not insert module %s: Unknown symbol in module", file)
		}
	}
	if m.Name != "drv_pcie_host" {
		if err := os.Mkdir(filepath.Join("/sys/module", m.Name), 0o755); err != nil {
			return fail("could not insert module %s: %v", file, err)
		}
		return 0
	}
	var c standin.Chips
	cb, err := os.ReadFile(standin.ChipsFile)
	if err == nil {
		err = json.Unmarshal(cb, &c)
	}
	if err != nil {
		return fail("test bed: the node's chips (%s): %v", standin.ChipsFile, err)
	}
	// 0666 as the test bed's boot leaves them (realnode hostroot.go).
	if err := standin.LoadDriver(func(p string) string { return p }, []string{m.Name}, c, 0o666); err != nil {
		return fail("could not insert module %s: %v", file, err)
	}
	return 0
}
