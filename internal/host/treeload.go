package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/openfuyao/npu-stack/internal/drivertree"
)

// LoadTree loads the driver tree's modules into the kernel, in upstream's
// order (drivertree.LoadOrder over the tree's own specific_func.inc), by
// running the host's insmod on each <tree>/host/<name>.ko, chrooted into
// the host root: modprobe cannot serve, since it finds modules only under
// /lib/modules, which is read-only where tree mode is used. A module
// already loaded (/sys/module/<name>, a retry after a partial load) is
// skipped. It returns the modules it loaded; a failed optional module is
// in skipped with insmod's words.
func (l *Linux) LoadTree(ctx context.Context) (loaded []string, skipped []string, err error) {
	root := l.driverRoot()
	order, err := l.treeLoadOrder(root)
	if err != nil {
		return nil, nil, err
	}
	insmod, err := l.findHost(InsmodPaths)
	if err != nil {
		return nil, nil, &ProblemError{What: fmt.Sprintf("no insmod on the host (looked for %s)", strings.Join(InsmodPaths, ", ")),
			Fix: "install kmod in the node's OS image: the driver pod loads the driver's modules with the host's insmod"}
	}
	run := l.Run
	if run == nil {
		run = ExecRunner
	}
	for _, m := range order {
		if _, err := os.Stat(l.Path("/sys/module/" + m.Name)); err == nil {
			continue
		}
		ko := filepath.Join(root, drivertree.ModuleDir, m.Name+".ko")
		e := Exec{Root: l.Root, Path: insmod, Args: []string{ko}, Env: []string{"PATH=" + hostPATH}}
		_, err := run(ctx, e)
		if err == nil {
			loaded = append(loaded, m.Name)
			continue
		}
		words := err.Error()
		if ee, ok := IsExitError(err); ok {
			words = strings.TrimSpace(string(ee.Stderr) + " " + string(ee.Output))
		}
		if m.Optional {
			skipped = append(skipped, fmt.Sprintf("%s (%s)", m.Name, words))
			continue
		}
		return loaded, skipped, fmt.Errorf("load the driver module %s (%s): %s: %w", m.Name, command(e), words, err)
	}
	return loaded, skipped, nil
}

// treeLoadOrder reads the tree's module list and modules.
func (l *Linux) treeLoadOrder(root string) ([]drivertree.Module, error) {
	inc := filepath.Join(root, drivertree.SpecificFunc)
	b, err := os.ReadFile(l.Path(inc))
	if err != nil {
		return nil, &ProblemError{What: fmt.Sprintf("the driver tree has no module list %s", inc), Err: err,
			Fix: "install a complete driver tree: its image must carry script/specific_func.inc of the vendor package (docs/installation.md)"}
	}
	listed, err := drivertree.ParseModuleList(b)
	if err != nil {
		return nil, &ProblemError{What: fmt.Sprintf("%s cannot be read", inc), Err: err, Fix: "install a driver tree built from the vendor package (docs/installation.md)"}
	}
	dir := filepath.Join(root, drivertree.ModuleDir)
	entries, err := os.ReadDir(l.Path(dir))
	if err != nil {
		return nil, &ProblemError{What: fmt.Sprintf("the driver tree has no module directory %s", dir), Err: err,
			Fix: "a tree-mode driver image keeps the package's driver/host/*.ko, built for the node's kernel (docs/installation.md)"}
	}
	var present []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".ko"); ok && !e.IsDir() {
			present = append(present, name)
		}
	}
	_, err = os.Stat(l.Path(KsecurecModule))
	order, oerr := drivertree.LoadOrder(listed, present, err == nil)
	if oerr != nil {
		return nil, &ProblemError{What: fmt.Sprintf("driver tree %s", root), Err: oerr, Fix: "install a driver tree built from the vendor package for this chip (docs/installation.md)"}
	}
	return order, nil
}

// KsecurecModule is there when the kernel has ksecurec, whose presence
// makes upstream's installer skip drv_seclib_host (hicann/driver v8.5.0
// deal_ko.sh driver_auto_insmod: `lsmod | grep ksecurec`; lsmod lists
// /sys/module's loaded modules).
const KsecurecModule = "/sys/module/ksecurec"

// findHost is the first of paths that exists on the host, as a host path.
func (l *Linux) findHost(paths []string) (string, error) {
	for _, p := range paths {
		_, err := os.Stat(l.Path(p))
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	return "", fs.ErrNotExist
}
