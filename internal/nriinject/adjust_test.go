package nriinject

import (
	"strings"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"
)

// TestAdjust: the CDI library fills in a device node's numbers from the
// host (here /dev/null standing for the host's node) and the adjustment
// carries the plan's nodes, mounts and variables for containerd.
func TestAdjust(t *testing.T) {
	p := &Plan{Chips: []int{0}, Edits: specs.ContainerEdits{
		Env:         []string{"LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64", "ASCEND_VISIBLE_DEVICES=0"},
		DeviceNodes: []*specs.DeviceNode{{Path: "/dev/davinci_manager"}},
		Mounts:      []*specs.Mount{{HostPath: "/var/lib/Ascend/driver/lib64", ContainerPath: "/usr/local/Ascend/driver/lib64", Options: []string{"ro", "nosuid", "nodev", "bind"}}},
	}}
	var asked []string
	adj, err := Adjust(p, func(p string) string { asked = append(asked, p); return "/dev/null" })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(asked, ",") != "/dev/davinci_manager" {
		t.Errorf("host paths looked up: %v", asked)
	}
	devs := adj.GetLinux().GetDevices()
	if len(devs) != 1 || devs[0].Path != "/dev/davinci_manager" || devs[0].Type != "c" || devs[0].Major != 1 || devs[0].Minor != 3 {
		t.Errorf("devices %v, want /dev/davinci_manager c 1:3 (the host node's numbers)", devs)
	}
	ms := adj.GetMounts()
	if len(ms) != 1 || ms[0].Source != "/var/lib/Ascend/driver/lib64" || ms[0].Destination != "/usr/local/Ascend/driver/lib64" || !strings.Contains(strings.Join(ms[0].Options, ","), "ro") {
		t.Errorf("mounts %v", ms)
	}
	var env []string
	for _, kv := range adj.GetEnv() {
		env = append(env, kv.Key+"="+kv.Value)
	}
	if strings.Join(env, " ") != "LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64 ASCEND_VISIBLE_DEVICES=0" {
		t.Errorf("env %v", env)
	}
	// A node the host lacks is an error, not a silent omission.
	if _, err := Adjust(p, func(string) string { return "/nonexistent/davinci_manager" }); err == nil {
		t.Error("missing host device node accepted")
	}
}
