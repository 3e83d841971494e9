package uninstall

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	securejoin "github.com/cyphar/filepath-securejoin"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// HostFiles are npu-stack's own files on a node, as host paths: what the
// driver pod removes when npu-hooks uninstall stops it. The driver itself
// (its tree, modules, npu-smi, /etc/ascend_install.info) is not among
// them: the chips cannot survive unloading it, and the node keeps booting
// it after npu-stack is gone.
type HostFiles struct {
	// CDISpecs are the CDI spec files the device plugin's pods write
	// (cdi.specDir/<kind>.yaml).
	CDISpecs []string
	// MarkerDir is driver.markerDir (/run/npu-stack): the per-boot markers.
	MarkerDir string
	// StateDir is host.StateDir (/var/lib/npu-stack): the installer's
	// staging directory and its lock.
	StateDir string
}

// Paths lists the files and directories to remove.
func (f HostFiles) Paths() []string {
	var out []string
	for _, p := range append(append([]string{}, f.CDISpecs...), f.MarkerDir, f.StateDir) {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// CleanupRequest returns the request of npu-hooks uninstall a driver pod
// stopping now acts on: its DaemonSet ds is being deleted (marked deleted,
// which a foreground deletion keeps visible until the pods are gone) and
// carries the uninstall annotation. A DaemonSet not found (nil), or not
// being deleted (a rolling update replaces the pod), or deleted without
// the annotation (helm uninstall alone, a profile renamed), is no request:
// the node keeps its files, which the pods of a new DaemonSet still use.
func CleanupRequest(k contract.Keys, ds *appsv1.DaemonSet) (string, bool) {
	if ds == nil || ds.DeletionTimestamp == nil {
		return "", false
	}
	req, ok := ds.Annotations[k.UninstallRequested()]
	return req, ok && req != ""
}

// RemoveHostFiles removes paths, host paths seen under root (where this
// process reaches the host's /), and returns those that existed. Each
// path's directory is resolved within root as the host resolves it (on
// most hosts /var/run is a link to /run, which inside a container would
// otherwise lead to the container's own /run); the last element is
// removed as it is, a link included, never what it points to.
func RemoveHostFiles(root string, paths []string) ([]string, error) {
	var removed []string
	var errs []error
	for _, p := range paths {
		clean := filepath.Clean(p)
		if !filepath.IsAbs(clean) || clean == "/" {
			errs = append(errs, fmt.Errorf("host path %q: not an absolute path below /", p))
			continue
		}
		dir, err := securejoin.SecureJoin(root, filepath.Dir(clean))
		if err != nil {
			errs = append(errs, fmt.Errorf("resolve host path %s: %w", p, err))
			continue
		}
		target := filepath.Join(dir, filepath.Base(clean))
		if _, err := os.Lstat(target); errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			errs = append(errs, fmt.Errorf("host path %s: %w", p, err))
			continue
		}
		if err := os.RemoveAll(target); err != nil {
			errs = append(errs, fmt.Errorf("remove host path %s: %w", p, err))
			continue
		}
		removed = append(removed, p)
	}
	return removed, errors.Join(errs...)
}
