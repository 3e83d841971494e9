// Package nriinject gives every container the kubelet allocated Ascend
// chips the driver's user space, at creation, from the node's CDI spec
// (internal/cdi), through containerd's Node Resource Interface (NRI):
// the MindCluster v7.3.0 device plugin hands a container only its device
// nodes (docs/host-contract.md section 9), and containerd applies a CDI
// spec only to containers that name its devices.
//
// The allocation is read from the container's Linux device nodes, which
// the kubelet filled in from the device plugin's Allocate answer
// (/dev/davinci<N>; containerd v2.4.2 internal/cri/nri/nri_api_linux.go
// GetLinuxDevices). Decide is the pure decision; Adjust turns it into an
// NRI adjustment with the CDI library; Plugin is the NRI stub around both.
package nriinject

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/openfuyao/npu-stack/internal/cdi"
)

// VisibleDevicesVar lists the container's chips by physical ID, comma
// separated, as the vendor device plugin sets it when Ascend Docker
// Runtime mounts the driver (Ascend/mind-cluster v7.3.0,
// component/ascend-device-plugin/pkg/common/common.go SetAscendRuntimeEnv;
// component/ascend-common/api/default_name.go AscendVisibleDevicesEnv).
const VisibleDevicesVar = "ASCEND_VISIBLE_DEVICES"

var chipNode = regexp.MustCompile(`^/dev/davinci([0-9]+)$`)

// Container is what the injector knows of a container at its creation.
type Container struct {
	PodNamespace string
	PodName      string
	PodLabels    map[string]string
	Name         string
	// Devices are the paths of the container's device nodes.
	Devices []string
	// Mounts are the destinations the container already mounts.
	Mounts []string
	// Env is the container's environment, KEY=VALUE (image and pod).
	Env []string
}

func (c Container) String() string { return c.PodNamespace + "/" + c.PodName + "/" + c.Name }

// Driver is the node's driver as the injector reads it at a creation.
type Driver struct {
	Node string
	// SpecPath is the CDI spec's host path, for messages.
	SpecPath string
	// Spec is the node's CDI spec, nil when the file does not exist.
	Spec *specs.Spec
	// SpecErr is why an existing spec could not be used.
	SpecErr error
	// RequireMarker: a driver pod manages the driver, so its driver-ready
	// marker says whether the driver is ready and which version is loaded.
	RequireMarker bool
	// Ready and ReadyVersion are the driver-ready marker and its version.
	Ready        bool
	ReadyVersion string
	// MarkerFile is the marker's host path, for messages.
	MarkerFile string
}

// Own names the pods left as written: the chart's own (its namespace and
// release, app.kubernetes.io/instance).
type Own struct {
	Namespace string
	Instance  string
}

// InstanceLabel is the chart's release label (templates/_helpers.tpl
// npu-stack.selectorLabels).
const InstanceLabel = "app.kubernetes.io/instance"

// Plan is what a container gets.
type Plan struct {
	// Chips are the allocated chips' physical IDs, ascending.
	Chips []int
	// Edits are the spec's edits for those chips, less what the container
	// already has: device nodes it has, mounts at destinations it already
	// mounts, and variables it sets (the loader path is merged instead).
	Edits specs.ContainerEdits
	// Skipped are the destinations left to the container's own mounts.
	Skipped []string
}

// ErrNotReady marks a refusal because the node's driver is not ready.
var ErrNotReady = errors.New("NPU driver not ready")

// Decide returns the plan for c, nil when c is left alone (no chip, or a
// pod of the chart), or an error wrapping ErrNotReady that refuses c's
// creation because the node cannot give it a matching driver.
func Decide(c Container, d Driver, own Own) (*Plan, error) {
	if own.Namespace != "" && c.PodNamespace == own.Namespace && (own.Instance == "" || c.PodLabels[InstanceLabel] == own.Instance) {
		return nil, nil
	}
	chips := allocated(c.Devices)
	if len(chips) == 0 {
		return nil, nil
	}
	notReady := func(format string, a ...any) error {
		return fmt.Errorf("node %s: container %s was allocated %s, but %w: %s", d.Node, c, davinciList(chips), ErrNotReady, fmt.Sprintf(format, a...))
	}
	if d.RequireMarker && !d.Ready {
		return nil, notReady("no driver-ready marker %s (the driver pod has not loaded the driver, or the health-watch found the chips wedged); the pod is retried and starts once `kubectl get node %s -L npu.openfuyao.com/driver-ready` shows true", d.MarkerFile, d.Node)
	}
	if d.SpecErr != nil {
		return nil, notReady("CDI spec %s unusable: %v; delete this node's npu-stack device-plugin pod to regenerate it", d.SpecPath, d.SpecErr)
	}
	if d.Spec == nil {
		return nil, notReady("no CDI spec at %s (the device-plugin pod's cdi-generate writes it once the driver is ready; check cdi.enabled and that pod)", d.SpecPath)
	}
	if d.RequireMarker {
		if v := cdi.SpecVersion(d.Spec); v != d.ReadyVersion {
			return nil, notReady("CDI spec %s describes driver %q, the loaded driver is %q; delete this node's npu-stack device-plugin pod to regenerate it", d.SpecPath, v, d.ReadyVersion)
		}
	}
	var edits specs.ContainerEdits
	for _, n := range chips {
		dev := findDevice(d.Spec, strconv.Itoa(n))
		if dev == nil {
			// Not a physical chip: a virtual NPU, which the vendor plugin
			// hands out as /dev/davinci<id> from the host's
			// /dev/vdavinci<id> (Ascend/mind-cluster v7.3.0,
			// component/ascend-device-plugin/pkg/server/plugin.go
			// getDevPath). The spec has no node for it; the container
			// gets the driver's user space.
			dev = findDevice(d.Spec, cdi.DriverDevice)
		}
		if dev == nil {
			return nil, notReady("CDI spec %s has neither a device %d for /dev/davinci%d nor the %q device; delete this node's npu-stack device-plugin pod to regenerate it", d.SpecPath, n, n, cdi.DriverDevice)
		}
		merge(&edits, dev.ContainerEdits)
	}
	p := &Plan{Chips: chips}
	p.Edits, p.Skipped = subtract(edits, c)
	p.Edits.Env = append(p.Edits.Env, VisibleDevicesVar+"="+joinInts(chips))
	return p, nil
}

func allocated(devices []string) []int {
	var chips []int
	for _, p := range devices {
		if m := chipNode.FindStringSubmatch(p); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && !slices.Contains(chips, n) {
				chips = append(chips, n)
			}
		}
	}
	sort.Ints(chips)
	return chips
}

func findDevice(s *specs.Spec, name string) *specs.Device {
	for i := range s.Devices {
		if s.Devices[i].Name == name {
			return &s.Devices[i]
		}
	}
	return nil
}

// merge adds e's edits to into, once per device path, mount destination
// and variable name.
func merge(into *specs.ContainerEdits, e specs.ContainerEdits) {
	for _, n := range e.DeviceNodes {
		if !slices.ContainsFunc(into.DeviceNodes, func(o *specs.DeviceNode) bool { return o.Path == n.Path }) {
			c := *n
			into.DeviceNodes = append(into.DeviceNodes, &c)
		}
	}
	for _, m := range e.Mounts {
		if !slices.ContainsFunc(into.Mounts, func(o *specs.Mount) bool { return o.ContainerPath == m.ContainerPath }) {
			c := *m
			c.Options = slices.Clone(m.Options)
			into.Mounts = append(into.Mounts, &c)
		}
	}
	for _, kv := range e.Env {
		if _, ok := lookup(into.Env, name(kv)); !ok {
			into.Env = append(into.Env, kv)
		}
	}
}

// subtract drops from e what c already has. The loader path is merged:
// the container's own directories first, then the driver's it lacks.
func subtract(e specs.ContainerEdits, c Container) (specs.ContainerEdits, []string) {
	var out specs.ContainerEdits
	var skipped []string
	for _, n := range e.DeviceNodes {
		if !slices.Contains(c.Devices, n.Path) {
			out.DeviceNodes = append(out.DeviceNodes, n)
		}
	}
	for _, m := range e.Mounts {
		if slices.Contains(c.Mounts, m.ContainerPath) {
			skipped = append(skipped, m.ContainerPath)
			continue
		}
		out.Mounts = append(out.Mounts, m)
	}
	for _, kv := range e.Env {
		k, v, _ := strings.Cut(kv, "=")
		own, ok := lookup(c.Env, k)
		switch {
		case !ok:
			out.Env = append(out.Env, kv)
		case k == cdi.LibraryPathVar:
			if merged := mergePath(own, v); merged != own {
				out.Env = append(out.Env, k+"="+merged)
			}
		}
	}
	return out, skipped
}

func mergePath(own, add string) string {
	dirs := strings.Split(own, ":")
	for _, d := range strings.Split(add, ":") {
		if d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return strings.Trim(strings.Join(dirs, ":"), ":")
}

func name(kv string) string { k, _, _ := strings.Cut(kv, "="); return k }

// lookup returns the last value of k in env, as the kernel's environment
// gives the process (later entries win in containerd's spec).
func lookup(env []string, k string) (string, bool) {
	val, found := "", false
	for _, kv := range env {
		if n, v, ok := strings.Cut(kv, "="); ok && n == k {
			val, found = v, true
		}
	}
	return val, found
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func davinciList(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = "/dev/davinci" + strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}
