package chart_test

import (
	"fmt"
	"strings"
	"testing"
)

// The driver container installs into the host itself: driver-entry sees
// the host's / read-write at /host and is told its profile's tree; no
// mount the vendor installer would break (a single-file bind mount that
// `sed -i` cannot rename over, a read-only /lib/modules) and no
// DirectoryOrCreate of the tree (kubelet cannot create it on KubeOS's
// read-only /usr).
func TestDriverContainerInstallsIntoTheHostRoot(t *testing.T) {
	for _, v := range append(variants(), variant{name: "mixed-fleet", vals: mixedFleet}) {
		r := mustRender(t, v)
		for _, o := range r.ofKind("DaemonSet") {
			c, ok := containers(t, o, "containers")["driver"]
			if !ok {
				continue
			}
			where := fmt.Sprintf("%s: %s container driver", v.name, o.GetName())
			sub, args := healthwatchCommand(c)
			if sub != "driver-entry" || !hasArg(args, "--host-root=/host") {
				t.Errorf("%s runs %s %q; want driver-entry --host-root=/host", where, sub, args)
			}
			wantRoot := "/usr/local/Ascend/driver"
			if strings.HasSuffix(o.GetName(), "kubeos") {
				wantRoot = "/var/lib/Ascend/driver"
			}
			if !hasArg(args, "--driver-root="+wantRoot) {
				t.Errorf("%s: %q lacks --driver-root=%s (the profile's tree)", where, args, wantRoot)
			}
			_, probe := healthwatchCommand(map[string]any{"command": c["readinessProbe"].(map[string]any)["exec"].(map[string]any)["command"]})
			if !hasArg(probe, "--host-root=/host") {
				t.Errorf("%s: readiness probe %q reads the marker outside the host root", where, probe)
			}
			mounts := mountsOf(t, o, c)
			root := mounts["/host"]
			if root.hostPath != "/" || root.hostType != "Directory" || root.readOnly || root.propagation != "HostToContainer" {
				t.Errorf("%s: /host is %+v, want the host's / (type Directory) read-write with HostToContainer propagation", where, root)
			}
			for path, m := range mounts {
				if m.hostType == "File" || m.hostType == "FileOrCreate" {
					t.Errorf("%s: single-file mount %s of %s: the installer's sed -i cannot rename over it", where, path, m.hostPath)
				}
				if m.hostType == "DirectoryOrCreate" && strings.HasPrefix(m.hostPath, "/usr") {
					t.Errorf("%s: DirectoryOrCreate of %s fails on KubeOS's read-only /usr", where, m.hostPath)
				}
				if path == "/lib/modules" {
					t.Errorf("%s mounts /lib/modules %+v: the installer writes the host's through /host", where, m)
				}
			}
		}
	}
}
