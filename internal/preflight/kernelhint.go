package preflight

import (
	"fmt"
	"strings"
)

// kernelHint explains why a node no profile covers missed a profile that
// looks meant for it: same chip and OS, and a kernel that is only the
// beginning of the node's. With Node Feature Discovery the kernel label
// (feature.node.kubernetes.io/kernel-version.full) is the whole release,
// `uname -r` (node-feature-discovery v0.19.0 source/kernel/version.go),
// such as 6.6.0-145.0.4.135.oe2403sp3.aarch64, while a driver image tag
// carries only 6.6.0-145.0.4.135: a profile written from the tag matches
// no node. "" when no profile is that close.
func kernelHint(nodeLabels map[string]string, profiles []Profile, l ProfileLabels) string {
	kernel := nodeLabels[l.Kernel]
	for _, p := range profiles {
		if p.Chip != nodeLabels[l.Chip] || p.OS != nodeLabels[l.OS] || p.Kernel == kernel || !strings.HasPrefix(kernel, p.Kernel) {
			continue
		}
		return fmt.Sprintf("; profile %s has kernel %q, only the beginning of this node's %s=%q: set the profile's kernel to %q (the node label's whole value) and imageKernel to %q (the kernel part of the driver image tag)",
			p.Name, p.Kernel, l.Kernel, kernel, kernel, p.Kernel)
	}
	return ""
}
