package preflight

// What a driver image must hold, decided from what it holds: the paths of
// the profile's install mode (drivertree.Required) and, where the files
// say which driver they are, that version. The reading is imagefs's
// (registry I/O in contentsreg.go); everything here is pure.

import (
	"archive/tar"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/openfuyao/npu-stack/internal/drivertree"
	"github.com/openfuyao/npu-stack/internal/imagefs"
)

// versionInfoLimit bounds what is read of a tree's version.info: its
// Version= line is the first (hicann/driver v8.5.0 scripts/package/
// common/py/version_info.py VersionInfoFile), the file a few lines.
const versionInfoLimit = 4096

// moduleGlob is what a tree's host/ directory must hold one of.
const moduleGlob = "*.ko"

// Need is what one profile's driver image must hold.
type Need struct {
	Mode      string // drivertree.ModeRun or ModeTree
	Installer string // driver.installCommand[0]
	Tree      string // driver.imageTreePath
	// Version is driver.version, which the tree's version.info must name.
	Version string
}

func (n Need) mode() string {
	if n.Mode == "" {
		return drivertree.ModeRun
	}
	return n.Mode
}

func (n Need) tree() string {
	if n.Tree == "" {
		return drivertree.DefaultImageTree
	}
	return n.Tree
}

// Probes are the paths to look up in the image.
func (n Need) Probes() ([]imagefs.Probe, error) {
	paths, err := drivertree.Required(n.mode(), n.Installer, n.tree())
	if err != nil {
		return nil, err
	}
	probes := make([]imagefs.Probe, len(paths))
	for i, p := range paths {
		probes[i] = imagefs.Probe{Path: p}
		switch {
		case strings.HasSuffix(p, "/"):
			probes[i].Match = moduleGlob
		case n.mode() == drivertree.ModeTree && path.Base(p) == drivertree.VersionFile:
			probes[i].Read = versionInfoLimit
		}
	}
	return probes, nil
}

// fix is how to repair an image that lacks what mode needs.
func (n Need) fix() string {
	if n.mode() == drivertree.ModeTree {
		return fmt.Sprintf("build the image with the installed driver tree at driver.imageTreePath (%s): version.info, script/specific_func.inc, tools/npu-smi and the kernel modules in host/ (docs/installation.md, \"The driver image\"), or set driver.imageTreePath to where the image holds it", n.tree())
	}
	return fmt.Sprintf("set driver.installCommand to the vendor package's path in the image, or build the image with the package at %s (docs/installation.md, \"The driver image\")", n.Installer)
}

// Judge says what is wrong with one platform's image (image names it,
// platform as linux/<arch>), given the answers to n.Probes(), one
// sentence each, naming the path and the fix; nil when nothing is.
func (n Need) Judge(image, platform string, answers []imagefs.Answer) []string {
	var out []string
	what := fmt.Sprintf("driver image %s (%s)", image, platform)
	for _, a := range answers {
		where := a.Path
		if a.Resolved != "" {
			where = fmt.Sprintf("%s (a link to %s)", a.Path, a.Resolved)
		}
		switch {
		case !a.Found:
			out = append(out, fmt.Sprintf("%s lacks %s, which install mode %q needs: %s; %s", what, strings.TrimSuffix(a.Path, "/")+n.suffix(a), n.mode(), a.Why, n.fix()))
		case a.Dir():
		case a.Type != tar.TypeReg:
			out = append(out, fmt.Sprintf("%s has %s, but it is %s, not a file; %s", what, where, typeName(a.Type), n.fix()))
		case n.mode() == drivertree.ModeTree && path.Base(a.Path) == drivertree.VersionFile:
			if msg := n.judgeVersion(what, where, a.Data); msg != "" {
				out = append(out, msg)
			}
		}
	}
	return out
}

// suffix names what a directory probe looked for in it.
func (n Need) suffix(a imagefs.Answer) string {
	if a.Dir() {
		return "/" + a.Match
	}
	return ""
}

// judgeVersion compares the tree's version.info with driver.version,
// verbatim, as driver-entry and the rollout compare the loaded driver's
// (docs/host-contract.md section 1).
func (n Need) judgeVersion(what, where string, data []byte) string {
	v, err := drivertree.ParseVersionInfo(data)
	if err != nil {
		return fmt.Sprintf("%s has %s, but it is not a driver version file: %v; %s", what, where, err, n.fix())
	}
	if v == n.Version {
		return ""
	}
	return fmt.Sprintf("%s holds driver %s (%s: Version=%s), not driver.version %s: every node of the profile would install %s; point the profile at the image of %s (driver.version, driver.image, driver.tagTemplate) or set driver.version to %s",
		what, v, where, v, n.Version, v, n.Version, v)
}

func typeName(t byte) string {
	switch t {
	case tar.TypeDir:
		return "a directory"
	case tar.TypeChar, tar.TypeBlock:
		return "a device node"
	case tar.TypeFifo:
		return "a FIFO"
	}
	return fmt.Sprintf("of tar type %q", t)
}

// upstreamPackage is the vendor's name for a driver package:
// <product>-<chip>-<func>_<version>_<os and arch>.run, product Ascend-hdk,
// func driver (open builds) or npu-driver (released packages), version in
// lower case (hicann/driver v8.5.0 scripts/package/common/py/packer.py
// PackageName.getvalue; scripts/package/driver/ascend910B/driver.xml
// package_info; released: Ascend-hdk-910b-npu-driver_25.0.rc1.1_linux-
// aarch64.run, docs/host-contract.md section 1).
var upstreamPackage = regexp.MustCompile(`^Ascend-hdk-[0-9A-Za-z_]+-(?:npu-)?driver_([^_]+)_[^/]+\.run$`)

// PackageVersion is the version in an installer's file name when the
// name is upstream's package name.
func PackageVersion(file string) (string, bool) {
	m := upstreamPackage.FindStringSubmatch(path.Base(file))
	if m == nil {
		return "", false
	}
	return m[1], true
}

// NameWarning is a note (not a refusal) when the run-mode installer's file
// name, in upstream's form, names another version than driver.version.
// Not a refusal: upstream does not say that the version in a package's
// name is the Version= of the version.info it installs, which is what
// driver.version must be, and the package's own version.info is inside
// its compressed payload, which preflight does not unpack.
func (n Need) NameWarning(image, platform string, answers []imagefs.Answer) string {
	if n.mode() != drivertree.ModeRun {
		return ""
	}
	for _, a := range answers {
		if !a.Found || a.Path != n.Installer {
			continue
		}
		file := a.Path
		if a.Resolved != "" {
			file = a.Resolved
		}
		if v, ok := PackageVersion(file); ok && !strings.EqualFold(v, n.Version) {
			return fmt.Sprintf("driver image %s (%s): the installer %s is named as upstream names version %s's package, and driver.version is %s; check that the image is the one of driver.version (driver-entry refuses a package whose version.info says otherwise, after installing it)",
				image, platform, file, v, n.Version)
		}
	}
	return ""
}
