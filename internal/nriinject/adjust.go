package nriinject

import (
	"fmt"

	"github.com/containerd/nri/pkg/api"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
)

// Adjust applies the plan's edits with the CDI library to an empty OCI
// spec (which fills in each device node's type and numbers from the
// host: hostPath maps a host path to where this process sees it) and
// returns them as the NRI adjustment containerd applies to the container.
func Adjust(p *Plan, hostPath func(string) string) (*api.ContainerAdjustment, error) {
	e := p.Edits
	e.DeviceNodes = nil
	for _, n := range p.Edits.DeviceNodes {
		c := *n
		src := n.HostPath
		if src == "" {
			src = n.Path
		}
		c.HostPath = hostPath(src)
		e.DeviceNodes = append(e.DeviceNodes, &c)
	}
	edits := &cdiapi.ContainerEdits{ContainerEdits: &e}
	if err := edits.Validate(); err != nil {
		return nil, fmt.Errorf("CDI edits for chips %v: %w", p.Chips, err)
	}
	scratch := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if err := edits.Apply(scratch); err != nil {
		return nil, fmt.Errorf("apply the CDI edits for chips %v: %w", p.Chips, err)
	}
	adj := &api.ContainerAdjustment{}
	for _, kv := range scratch.Process.Env {
		k, v := splitEnv(kv)
		adj.AddEnv(k, v)
	}
	for _, m := range scratch.Mounts {
		adj.AddMount(&api.Mount{Destination: m.Destination, Type: m.Type, Source: m.Source, Options: m.Options})
	}
	for _, d := range api.FromOCILinuxDevices(scratch.Linux.Devices) {
		adj.AddDevice(d)
	}
	return adj, nil
}

func splitEnv(kv string) (string, string) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:]
		}
	}
	return kv, ""
}
