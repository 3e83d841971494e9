package healthwatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/openfuyao/npu-stack/internal/cdi"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/marker"
)

// loadedVersion is the driver version a CDI spec generated now describes:
// the one the driver-ready marker names (what the driver pod loaded in
// this boot), else, with no driver pod (a pre-installed driver), the
// version.info of the loaded driver's tree.
func loadedVersion(ctx context.Context, h host.Host, markerDir string) (string, error) {
	if markerDir != "" {
		v, ok, err := marker.Dir{Path: h.Path(markerDir)}.Ready()
		if err != nil {
			return "", err
		}
		if ok && v != "" {
			return v, nil
		}
	}
	v, err := h.LoadedDriver(ctx)
	if err != nil {
		return "", fmt.Errorf("the loaded driver's version, recorded in the CDI spec: %w", err)
	}
	return v, nil
}

func (s *shared) cdi() *cobra.Command {
	group := &cobra.Command{Use: "cdi", Short: "Container Device Interface spec of the node's chips"}
	var (
		o         cdi.Options
		output    string
		markerDir string
	)
	gen := &cobra.Command{
		Use:   "generate",
		Short: "Write the CDI spec: one device per /dev/davinciN, the common device nodes and the driver libraries",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := s.logger()
			if err != nil {
				return err
			}
			if output == "" {
				return errors.New("--output is required, such as /var/run/cdi/huawei-com-npu.yaml")
			}
			h, err := s.host(o.DriverRoot)
			if err != nil {
				return err
			}
			if o.DriverVersion, err = loadedVersion(cmd.Context(), h, markerDir); err != nil {
				return err
			}
			spec, err := cdi.Build(h, o)
			if err != nil {
				return err
			}
			path := h.Path(output)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return fmt.Errorf("CDI spec directory: %w", err)
			}
			if err := cdi.Write(path, spec); err != nil {
				return err
			}
			log.WithFields(logrus.Fields{"output": output, "kind": spec.Kind, "devices": len(spec.Devices) - 1, "driverVersion": o.DriverVersion}).Info("CDI spec written")
			return nil
		},
	}
	f := gen.Flags()
	f.StringVar(&o.Kind, "kind", cdi.DefaultKind, "CDI kind (vendor/class) of the devices")
	f.StringVar(&o.DriverRoot, "driver-root", host.DefaultDriverRoot, "host directory of the driver tree")
	f.StringVar(&output, "output", "", "host path of the spec file to write")
	f.StringVar(&markerDir, "marker-dir", "/run/npu-stack", "host directory of the readiness markers: the driver-ready marker names the loaded version the spec records")
	group.AddCommand(gen)
	return group
}
