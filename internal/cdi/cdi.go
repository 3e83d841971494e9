// Package cdi writes the Container Device Interface spec of a node's
// Ascend chips: a device per chip (huawei.com/npu=0), "all", and "driver",
// the driver's user space without device nodes.
//
// Who applies it: containerd's CRI applies CDI devices named by the
// container's CDIDevices field or by cdi.k8s.io/ keys of the container's
// annotations (containerd v2.4.0-beta.0, internal/cri/server/
// container_create_linux.go containerSpecOpts: customopts.WithCDI(
// config.Annotations, config.CDIDevices), config being the CRI
// ContainerConfig), and the kubelet puts pod annotations on the sandbox
// only (kubernetes pkg/kubelet/kuberuntime/labels.go newPodAnnotations,
// newContainerAnnotations). The MindCluster v7.3.0 device plugin returns
// neither. So a pod annotation does not bring the driver into a workload;
// workloads mount the driver user space by hostPath (docs), and the spec
// serves runtimes and plugins that name CDI devices (DRA drivers, nerdctl
// --device, podman --device).
package cdi

import (
	"fmt"
	"os"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

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

// ManagerDeviceNode is the device manager: the device plugin refuses to
// start without it, so its absence means no loaded driver.
const ManagerDeviceNode = "/dev/davinci_manager"

// CommonDeviceNodes are the control devices MindCluster v7.3.0's device
// plugin hands every container besides its /dev/davinciN, in its order:
// the device manager, then the host-device channel, shared virtual memory
// and the DVPP command list, each only when the host has it
// (component/ascend-device-plugin/pkg/common/common.go GetDefaultDevices,
// setDeviceByPath; pkg/server/plugin.go mountDefaultDevice). The list is
// the same for 910B, Atlas A3 (910_93) and 310P: GetDefaultDevices adds
// others only for the Atlas 200I SoC A1 and the 310B, or with -fdFlag
// (the chart does not pass it). The driver's host_sys_init.sh, one
// source for the 910B and A3 packages (hicann/driver v8.5.0 driver.xml
// l.85 of both), sets the modes of the first three and of dvpp_cmdlist
// when it exists (scripts/package/custom/driver/ascend910B/scripts/
// host_sys_init.sh g_change_mode_dev_list, changeDvppCmdlistMode).
var CommonDeviceNodes = []string{ManagerDeviceNode, "/dev/hisi_hdc", "/dev/devmm_svm", "/dev/dvpp_cmdlist"}

// DriverDevice names the device holding only the driver's user space.
const DriverDevice = "driver"

// containerDriverRoot is where workload images expect the driver tree,
// whatever the host's path (KubeOS: /var/lib/Ascend/driver): the vendor
// images' LD_LIBRARY_PATH names it (Ascend/mind-cluster v7.3.0,
// component/ascend-device-plugin/build/Dockerfile,
// component/npu-exporter/build/Dockerfile).
const containerDriverRoot = "/usr/local/Ascend/driver"

// containerNPUSMI is where workloads find npu-smi, as Ascend Docker
// Runtime mounts it (Ascend/mind-cluster v7.3.0,
// component/ascend-docker-runtime/build/scripts/base.list).
const containerNPUSMI = "/usr/local/bin/npu-smi"

var davinci = regexp.MustCompile(`^davinci([0-9]+)$`)

// Options describe the spec to build. Paths are host paths.
type Options struct {
	Kind       string
	DriverRoot string
	// DriverVersion is the loaded driver's version, recorded in the spec
	// (VersionAnnotation) so that its users can tell a stale spec.
	DriverVersion string
}

// Build inspects the host (through h) and returns the spec: one device per
// /dev/davinciN named N and an "all" device, each with the common device
// nodes the host has and the driver mounts, and a "driver" device with the
// mounts alone.
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
	if !exists(h, ManagerDeviceNode) {
		return nil, fmt.Errorf("%s not found: the NPU driver is not loaded (run after the driver is ready, e.g. behind `npu-healthwatch validate --wait`)", ManagerDeviceNode)
	}
	var common []*specs.DeviceNode
	for _, p := range CommonDeviceNodes {
		if exists(h, p) {
			common = append(common, &specs.DeviceNode{Path: p})
		}
	}
	mounts, err := driverMounts(h, o.DriverRoot)
	if err != nil {
		return nil, err
	}
	// Edits per device, none spec-wide: spec-wide edits come with every
	// device of the spec, and "driver" must bring no device node.
	env := []string{libraryPathEnv(mounts)}
	withDriver := func(nodes []*specs.DeviceNode) specs.ContainerEdits {
		return specs.ContainerEdits{Env: append([]string(nil), env...), DeviceNodes: append(nodes, cloneNodes(common)...), Mounts: cloneMounts(mounts)}
	}
	spec := &specs.Spec{Kind: o.Kind}
	if o.DriverVersion != "" {
		spec.Annotations = map[string]string{VersionAnnotation: o.DriverVersion}
	}
	var allNodes []*specs.DeviceNode
	for _, n := range chips {
		p := fmt.Sprintf("/dev/davinci%d", n)
		spec.Devices = append(spec.Devices, specs.Device{Name: strconv.Itoa(n), ContainerEdits: withDriver([]*specs.DeviceNode{{Path: p}})})
		allNodes = append(allNodes, &specs.DeviceNode{Path: p})
	}
	spec.Devices = append(spec.Devices,
		specs.Device{Name: AllDevice, ContainerEdits: withDriver(allNodes)},
		specs.Device{Name: DriverDevice, ContainerEdits: specs.ContainerEdits{Env: append([]string(nil), env...), Mounts: cloneMounts(mounts)}})
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

// driverMounts is the driver's user space, read-only, at the container
// paths Ascend Docker Runtime gives (Ascend/mind-cluster v7.3.0,
// component/ascend-docker-runtime/build/scripts/base.list: <driver>/lib64,
// <driver>/include, /usr/local/dcmi, /usr/local/bin/npu-smi) plus the
// files frameworks read: version.info and /etc/ascend_install.info (the
// driver version, Ascend/op-plugin torch_npu-utils-get_cann_version.md),
// and for multi-node HCCL jobs hccn_tool where MindCluster runs it
// (component/ascend-common/devmanager/hccn/hccn_tool.go l.59:
// /usr/local/Ascend/driver/tools/hccn_tool) and /etc/hccn.conf. Host
// paths are where this host has them: the tree at root, npu-smi where the
// installer put it (host.NPUSMIPaths, else <root>/tools/npu-smi); what the
// host lacks is left out (KubeOS has no /usr/local/dcmi).
func driverMounts(h host.Host, root string) ([]*specs.Mount, error) {
	if root == "" {
		return nil, fmt.Errorf("--driver-root is empty: set driver.hostDriverPath")
	}
	ro := []string{"ro", "nosuid", "nodev", "bind"}
	lib := path.Join(root, "lib64")
	if !exists(h, lib) {
		return nil, fmt.Errorf("driver libraries %s not found: set driver.hostDriverPath to the driver's install directory", lib)
	}
	mounts := []*specs.Mount{{HostPath: lib, ContainerPath: path.Join(containerDriverRoot, "lib64"), Options: ro}}
	optional := []struct{ host, ctr string }{
		{path.Join(root, "include"), path.Join(containerDriverRoot, "include")},
		{path.Join(root, host.VersionFile), path.Join(containerDriverRoot, host.VersionFile)},
		{host.InstallInfoFile, host.InstallInfoFile},
		{host.DCMIDir, host.DCMIDir},
	}
	for _, p := range append(append([]string{}, host.NPUSMIPaths...), path.Join(root, "tools", "npu-smi")) {
		if exists(h, p) {
			optional = append(optional, struct{ host, ctr string }{p, containerNPUSMI})
			break
		}
	}
	optional = append(optional,
		struct{ host, ctr string }{path.Join(root, "tools", "hccn_tool"), path.Join(containerDriverRoot, "tools", "hccn_tool")},
		struct{ host, ctr string }{HCCNConf, HCCNConf})
	for _, m := range optional {
		if exists(h, m.host) {
			mounts = append(mounts, &specs.Mount{HostPath: m.host, ContainerPath: m.ctr, Options: ro})
		}
	}
	return mounts, nil
}

// HCCNConf is the NPU NIC configuration HCCL jobs across nodes read
// (hccn_tool writes it). The driver installer creates it, 640 root:root
// (hicann/driver v8.5.0, scripts/package/custom/driver/common/scripts/
// run_driver_install.sh changeMode() l.116-120).
const HCCNConf = "/etc/hccn.conf"

// LibraryPathEnv is the loader path to the mounted driver libraries, in
// the order of the vendor device plugin image (Ascend/mind-cluster
// v7.3.0, component/ascend-device-plugin/build/Dockerfile ENV
// LD_LIBRARY_PATH), plus /usr/local/dcmi as the exporter image adds it
// (component/npu-exporter/build/Dockerfile) when the host has it.
func libraryPathEnv(mounts []*specs.Mount) string {
	dirs := []string{path.Join(containerDriverRoot, "lib64"), path.Join(containerDriverRoot, "lib64", "driver"), path.Join(containerDriverRoot, "lib64", "common")}
	for _, m := range mounts {
		if m.ContainerPath == host.DCMIDir {
			dirs = append(dirs, host.DCMIDir)
		}
	}
	return LibraryPathVar + "=" + strings.Join(dirs, ":")
}

// LibraryPathVar is the loader's search path variable (ld.so(8)).
const LibraryPathVar = "LD_LIBRARY_PATH"

// VersionAnnotation is the spec annotation naming the driver version the
// spec describes: the one loaded when it was generated.
const VersionAnnotation = "npu.openfuyao.com/driver-version"

// SpecVersion returns the driver version a spec was generated for, ""
// when it names none (a spec written before npu-stack recorded it).
func SpecVersion(s *specs.Spec) string { return s.Annotations[VersionAnnotation] }

func cloneNodes(ns []*specs.DeviceNode) []*specs.DeviceNode {
	out := make([]*specs.DeviceNode, len(ns))
	for i, n := range ns {
		c := *n
		out[i] = &c
	}
	return out
}

func cloneMounts(ms []*specs.Mount) []*specs.Mount {
	out := make([]*specs.Mount, len(ms))
	for i, m := range ms {
		c := *m
		c.Options = append([]string(nil), m.Options...)
		out[i] = &c
	}
	return out
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
