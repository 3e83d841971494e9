// Package cdi writes the Container Device Interface spec of a node's
// Ascend chips, so that runtimes (containerd, CRI-O) inject the devices
// and driver libraries from a device name like huawei.com/npu=0, and
// workloads need no vendor runtime hook.
package cdi

import (
	"fmt"
	"os"
	"path"
	"regexp"
	"sort"
	"strconv"

	yaml "go.yaml.in/yaml/v3"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/openfuyao/npu-stack/internal/atomicfile"
	"github.com/openfuyao/npu-stack/internal/host"
)

// DefaultKind is the chart's default cdi.kind.
const DefaultKind = "huawei.com/npu"

// AllDevice names the device that holds every chip.
const AllDevice = "all"

// CommonDeviceNodes are the control devices every Ascend container needs
// besides its /dev/davinciN: the device manager, shared virtual memory and
// the host-device channel.
var CommonDeviceNodes = []string{"/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"}

// containerNPUSMI is where workloads find npu-smi, as with the vendor's
// container runtime.
const containerNPUSMI = "/usr/local/bin/npu-smi"

var davinci = regexp.MustCompile(`^davinci([0-9]+)$`)

// Options describe the spec to build. Paths are host paths.
type Options struct {
	Kind       string
	DriverRoot string
}

// Build inspects the host (through h) and returns the spec: one device per
// /dev/davinciN named N, an "all" device, and the common device nodes and
// driver mounts as spec-wide edits.
func Build(h host.Host, o Options) (*specs.Spec, error) {
	if o.Kind == "" {
		o.Kind = DefaultKind
	}
	vendor, class := parser.ParseQualifier(o.Kind)
	if err := parser.ValidateVendorName(vendor); err != nil {
		return nil, fmt.Errorf("CDI kind %q: %w; set cdi.kind to vendor/class such as %s", o.Kind, err, DefaultKind)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return nil, fmt.Errorf("CDI kind %q: %w; set cdi.kind to vendor/class such as %s", o.Kind, err, DefaultKind)
	}
	chips, err := chipDevices(h)
	if err != nil {
		return nil, err
	}
	spec := &specs.Spec{Kind: o.Kind}
	all := specs.Device{Name: AllDevice}
	for _, n := range chips {
		node := &specs.DeviceNode{Path: fmt.Sprintf("/dev/davinci%d", n)}
		spec.Devices = append(spec.Devices, specs.Device{Name: strconv.Itoa(n), ContainerEdits: specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{node}}})
		all.ContainerEdits.DeviceNodes = append(all.ContainerEdits.DeviceNodes, &specs.DeviceNode{Path: node.Path})
	}
	spec.Devices = append(spec.Devices, all)
	for _, p := range CommonDeviceNodes {
		if !exists(h, p) {
			return nil, fmt.Errorf("%s not found: the NPU driver is not loaded (run after the driver is ready, e.g. behind `npu-healthwatch validate --wait`)", p)
		}
		spec.ContainerEdits.DeviceNodes = append(spec.ContainerEdits.DeviceNodes, &specs.DeviceNode{Path: p})
	}
	mounts, err := driverMounts(h, o.DriverRoot)
	if err != nil {
		return nil, err
	}
	spec.ContainerEdits.Mounts = mounts
	if spec.Version, err = specs.MinimumRequiredVersion(spec); err != nil {
		return nil, fmt.Errorf("CDI spec version: %w", err)
	}
	return spec, nil
}

func chipDevices(h host.Host) ([]int, error) {
	entries, err := os.ReadDir(h.Path("/dev"))
	if err != nil {
		return nil, fmt.Errorf("list /dev: %w", err)
	}
	var chips []int
	for _, e := range entries {
		if m := davinci.FindStringSubmatch(e.Name()); m != nil {
			n, err := strconv.Atoi(m[1])
			if err != nil {
				continue // more digits than an int holds: not a chip
			}
			chips = append(chips, n)
		}
	}
	if len(chips) == 0 {
		return nil, fmt.Errorf("no /dev/davinciN device: the NPU driver is not loaded or the node has no chips")
	}
	sort.Ints(chips)
	return chips, nil
}

// driverMounts mounts the driver's user-space libraries read-only at the
// same path, which the CANN toolkit in workload images expects, plus the
// version file and npu-smi when the driver tree has them.
func driverMounts(h host.Host, root string) ([]*specs.Mount, error) {
	if root == "" {
		return nil, fmt.Errorf("--driver-root is empty: set driver.hostDriverPath")
	}
	ro := []string{"ro", "nosuid", "nodev", "bind"}
	lib := path.Join(root, "lib64")
	if !exists(h, lib) {
		return nil, fmt.Errorf("driver libraries %s not found: set driver.hostDriverPath to the driver's install directory", lib)
	}
	mounts := []*specs.Mount{{HostPath: lib, ContainerPath: lib, Options: ro}}
	for _, m := range []struct{ host, ctr string }{
		{path.Join(root, "version.info"), path.Join(root, "version.info")},
		{path.Join(root, "tools", "npu-smi"), containerNPUSMI},
	} {
		if exists(h, m.host) {
			mounts = append(mounts, &specs.Mount{HostPath: m.host, ContainerPath: m.ctr, Options: ro})
		}
	}
	return mounts, nil
}

func exists(h host.Host, p string) bool {
	_, err := os.Stat(h.Path(p))
	return err == nil
}

// Write stores spec at path (as this process reaches it) atomically with
// mode 0644, after the CDI library has read back and validated exactly
// the bytes that will be installed.
func Write(path string, spec *specs.Spec) error {
	data, err := yaml.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode CDI spec: %w", err)
	}
	return atomicfile.WriteVerified(path, data, 0o644, func(tmp string) error {
		if _, err := cdiapi.ReadSpec(tmp, 0); err != nil {
			return fmt.Errorf("generated CDI spec is invalid: %w", err)
		}
		return nil
	})
}
