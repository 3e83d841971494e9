package healthwatch

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/openfuyao/npu-stack/internal/marker"
	"github.com/openfuyao/npu-stack/internal/nriinject"
)

// nriInject runs the NRI injector (internal/nriinject): every container
// allocated chips gets the driver's user space from the node's CDI spec.
func (s *shared) nriInject() *cobra.Command {
	var (
		p         nriinject.Plugin
		socket    string
		markerDir string
	)
	cmd := &cobra.Command{
		Use:   "nri-inject",
		Short: "Give every container allocated NPU chips their driver user space from the node's CDI spec, through the container runtime's NRI",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := s.logger()
			if err != nil {
				return err
			}
			if p.Node == "" {
				return errors.New("--node-name is required (the chart passes $(NODE_NAME))")
			}
			if p.SpecFile == "" {
				return errors.New("--cdi-spec is required, such as /var/run/cdi/huawei-com-npu.yaml")
			}
			h, err := s.host("")
			if err != nil {
				return err
			}
			p.MarkerDir = markerDir
			p.HostPath = h.Path
			p.Log = log.WithField("node", p.Node)
			return nriinject.Run(cmd.Context(), &p, h.Path(socket), marker.Dir{Path: h.Path(markerDir)})
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Node, "node-name", "", "this node's name, for messages")
	f.StringVar(&p.SpecFile, "cdi-spec", "", "host path of the node's CDI spec (cdi generate --output)")
	f.StringVar(&markerDir, "marker-dir", "/run/npu-stack", "host directory of the readiness markers")
	f.BoolVar(&p.RequireMarker, "require-marker", true, "refuse chip containers while the driver-ready marker is absent or names another version than the spec (false for a pre-installed driver without driver pod)")
	f.StringVar(&p.Own.Namespace, "own-namespace", "", "namespace of the chart's own pods, left as written")
	f.StringVar(&p.Own.Instance, "own-instance", "", "their app.kubernetes.io/instance label (the release); empty = every pod of --own-namespace")
	f.StringVar(&socket, "nri-socket", "/var/run/nri/nri.sock", "host path of the runtime's NRI socket (containerd's plugins.\"io.containerd.nri.v1.nri\".socket_path)")
	return cmd
}

// nriReady exits 0 once the injector is registered with the runtime: the
// startup probe of the injector's container, which the device plugin in
// the same pod waits for.
func (s *shared) nriReady() *cobra.Command {
	var markerDir string
	cmd := &cobra.Command{
		Use:   "nri-ready",
		Short: "Succeed when the NRI injector is registered with the container runtime",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			h, err := s.host("")
			if err != nil {
				return err
			}
			_, ok, err := marker.Dir{Path: h.Path(markerDir)}.Injector()
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("the NRI injector is not registered (no marker in %s): see the nri-inject container's log", markerDir)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&markerDir, "marker-dir", "/run/npu-stack", "host directory of the readiness markers")
	return cmd
}
