package nriinject

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/openfuyao/npu-stack/internal/cdi"
)

const libPath = "LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/driver:/usr/local/Ascend/driver/lib64/common:/usr/local/dcmi"

// nodeSpec is a spec as cdi.Build writes it for chips 0..n-1 of a node
// with the driver at version.
func nodeSpec(n int, version string) *specs.Spec {
	ro := []string{"ro", "nosuid", "nodev", "bind"}
	mounts := func() []*specs.Mount {
		return []*specs.Mount{
			{HostPath: "/usr/local/Ascend/driver/lib64", ContainerPath: "/usr/local/Ascend/driver/lib64", Options: ro},
			{HostPath: "/usr/local/Ascend/driver/version.info", ContainerPath: "/usr/local/Ascend/driver/version.info", Options: ro},
			{HostPath: "/usr/local/sbin/npu-smi", ContainerPath: "/usr/local/bin/npu-smi", Options: ro},
		}
	}
	s := &specs.Spec{Kind: cdi.DefaultKind, Annotations: map[string]string{cdi.VersionAnnotation: version},
		Devices: []specs.Device{{Name: cdi.DriverDevice, ContainerEdits: specs.ContainerEdits{Env: []string{libPath}, Mounts: mounts()}}}}
	for i := 0; i < n; i++ {
		s.Devices = append(s.Devices, specs.Device{Name: fmt.Sprint(i), ContainerEdits: specs.ContainerEdits{
			Env:         []string{libPath},
			DeviceNodes: []*specs.DeviceNode{{Path: fmt.Sprintf("/dev/davinci%d", i)}, {Path: cdi.ManagerDeviceNode}, {Path: "/dev/hisi_hdc"}},
			Mounts:      mounts(),
		}})
	}
	return s
}

func TestDecide(t *testing.T) {
	ready := Driver{Node: "n1", SpecPath: "/var/run/cdi/huawei-com-npu.yaml", Spec: nodeSpec(8, "25.5.0"), RequireMarker: true, Ready: true, ReadyVersion: "25.5.0", MarkerFile: "/run/npu-stack/driver-ready"}
	own := Own{Namespace: "npu-operator", Instance: "npu-stack"}
	kubeletGave := func(chips ...int) []string {
		d := []string{cdi.ManagerDeviceNode, "/dev/hisi_hdc"}
		for _, c := range chips {
			d = append(d, fmt.Sprintf("/dev/davinci%d", c))
		}
		return d
	}
	allMounts := "/usr/local/Ascend/driver/lib64,/usr/local/Ascend/driver/version.info,/usr/local/bin/npu-smi"
	for _, tc := range []struct {
		name     string
		c        Container
		d        Driver
		wantNil  bool
		wantErr  string // substring; also must wrap ErrNotReady
		chips    string
		nodes    string
		mounts   string
		skipped  string
		env      string
		modified func(*Driver)
	}{
		{name: "no chip: untouched", c: Container{PodNamespace: "ml", Name: "sidecar", Devices: []string{"/dev/fuse"}}, d: ready, wantNil: true},
		{name: "one chip", c: Container{PodNamespace: "ml", Name: "train", Devices: kubeletGave(1)}, d: ready,
			chips: "1", nodes: "", mounts: allMounts, env: libPath + " ASCEND_VISIBLE_DEVICES=1"},
		{name: "two chips, control nodes once", c: Container{PodNamespace: "ml", Name: "train", Devices: kubeletGave(5, 3)}, d: ready,
			chips: "3,5", mounts: allMounts, env: libPath + " ASCEND_VISIBLE_DEVICES=3,5"},
		{name: "device node the kubelet did not give is added", c: Container{PodNamespace: "ml", Name: "train", Devices: []string{"/dev/davinci2"}}, d: ready,
			chips: "2", nodes: cdi.ManagerDeviceNode + ",/dev/hisi_hdc", mounts: allMounts, env: libPath + " ASCEND_VISIBLE_DEVICES=2"},
		{name: "hostPath workload keeps its mounts and loader path", c: Container{PodNamespace: "ml", Name: "legacy", Devices: kubeletGave(0),
			Mounts: []string{"/usr/local/Ascend/driver/lib64", "/usr/local/bin/npu-smi"}, Env: []string{"LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64:/opt/cann/lib"}}, d: ready,
			chips: "0", mounts: "/usr/local/Ascend/driver/version.info", skipped: "/usr/local/Ascend/driver/lib64,/usr/local/bin/npu-smi",
			env: "LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64:/opt/cann/lib:/usr/local/Ascend/driver/lib64/driver:/usr/local/Ascend/driver/lib64/common:/usr/local/dcmi ASCEND_VISIBLE_DEVICES=0"},
		{name: "loader path already complete: not set", c: Container{PodNamespace: "ml", Name: "x", Devices: kubeletGave(0), Env: []string{libPath}}, d: ready,
			chips: "0", mounts: allMounts, env: "ASCEND_VISIBLE_DEVICES=0"},
		{name: "chart's own pod: untouched", c: Container{PodNamespace: "npu-operator", PodLabels: map[string]string{InstanceLabel: "npu-stack"}, Name: "device-plugin", Devices: kubeletGave(0, 1, 2)}, d: ready, wantNil: true},
		{name: "same namespace, other release: injected", c: Container{PodNamespace: "npu-operator", PodLabels: map[string]string{InstanceLabel: "other"}, Name: "job", Devices: kubeletGave(4)}, d: ready,
			chips: "4", mounts: allMounts, env: libPath + " ASCEND_VISIBLE_DEVICES=4"},
		{name: "driver not ready: refused", c: Container{PodNamespace: "ml", PodName: "p", Name: "train", Devices: kubeletGave(0)},
			modified: func(d *Driver) { d.Ready, d.ReadyVersion = false, "" }, wantErr: "node n1: container ml/p/train was allocated /dev/davinci0, but NPU driver not ready: no driver-ready marker /run/npu-stack/driver-ready"},
		{name: "no spec: refused", c: Container{PodNamespace: "ml", Name: "train", Devices: kubeletGave(0)},
			modified: func(d *Driver) { d.Spec = nil }, wantErr: "no CDI spec at /var/run/cdi/huawei-com-npu.yaml"},
		{name: "unreadable spec: refused", c: Container{PodNamespace: "ml", Name: "train", Devices: kubeletGave(0)},
			modified: func(d *Driver) { d.Spec, d.SpecErr = nil, errors.New("yaml: bad") }, wantErr: "unusable: yaml: bad"},
		{name: "spec of another version: refused", c: Container{PodNamespace: "ml", Name: "train", Devices: kubeletGave(0)},
			modified: func(d *Driver) { d.ReadyVersion = "25.3.0" }, wantErr: `describes driver "25.5.0", the loaded driver is "25.3.0"`},
		{name: "virtual NPU (no such chip in the spec): driver user space", c: Container{PodNamespace: "ml", Name: "train", Devices: kubeletGave(100)}, d: ready,
			chips: "100", mounts: allMounts, env: libPath + " ASCEND_VISIBLE_DEVICES=100"},
		{name: "no such chip and no driver device: refused", c: Container{PodNamespace: "ml", Name: "train", Devices: kubeletGave(9)},
			modified: func(d *Driver) { d.Spec.Devices = d.Spec.Devices[1:] }, wantErr: `has neither a device 9 for /dev/davinci9 nor the "driver" device`},
		{name: "pre-installed driver: no marker needed, any version", c: Container{PodNamespace: "ml", Name: "train", Devices: kubeletGave(0)},
			modified: func(d *Driver) { d.RequireMarker, d.Ready, d.ReadyVersion = false, false, "" }, chips: "0", mounts: allMounts, env: libPath + " ASCEND_VISIBLE_DEVICES=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.d
			if tc.modified != nil {
				d = ready
				d.Spec = nodeSpec(8, "25.5.0")
				tc.modified(&d)
			}
			p, err := Decide(tc.c, d, own)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrNotReady) {
					t.Fatalf("error %v, want one containing %q wrapping ErrNotReady", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantNil {
				if p != nil {
					t.Fatalf("plan %+v, want the container left alone", p)
				}
				return
			}
			if p == nil {
				t.Fatal("no plan, want injection")
			}
			var nodes, mounts []string
			for _, n := range p.Edits.DeviceNodes {
				nodes = append(nodes, n.Path)
			}
			for _, m := range p.Edits.Mounts {
				mounts = append(mounts, m.ContainerPath)
			}
			check := func(what, got, want string) {
				if got != want {
					t.Errorf("%s %q, want %q", what, got, want)
				}
			}
			check("chips", joinInts(p.Chips), tc.chips)
			check("device nodes", strings.Join(nodes, ","), tc.nodes)
			check("mounts", strings.Join(mounts, ","), tc.mounts)
			check("skipped", strings.Join(p.Skipped, ","), tc.skipped)
			check("env", strings.Join(p.Edits.Env, " "), tc.env)
		})
	}
}
