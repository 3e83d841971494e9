package healthwatch

import (
	"context"
	"fmt"

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
