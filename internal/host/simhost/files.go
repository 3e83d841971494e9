package simhost

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DriverRoot is where the simulated vendor installer puts the driver
// tree, the installer's default (and the chart's driver.hostDriverPath).
const DriverRoot = "/usr/local/Ascend/driver"

// controlDevices appear with the driver next to one /dev/davinciN per chip.
var controlDevices = []string{"davinci_manager", "devmm_svm", "hisi_hdc"}

// createDevices models the device nodes a loaded driver creates in /dev,
// as plain files: enough for code that lists them, such as CDI generation.
func (h *Host) createDevices(st State) error {
	dev := h.Path("/dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return fmt.Errorf("simulated host %s: %w", h.Dir, err)
	}
	names := append([]string{}, controlDevices...)
	for i := 0; i < st.ChipCount; i++ {
		names = append(names, fmt.Sprintf("davinci%d", i))
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dev, n), nil, 0o660); err != nil {
			return fmt.Errorf("simulated host %s: %w", h.Dir, err)
		}
	}
	return nil
}

// removeDevices models /dev after a reboot: no driver, no device nodes.
func (h *Host) removeDevices() error {
	matches, err := filepath.Glob(filepath.Join(h.Path("/dev"), "davinci*"))
	if err != nil {
		return err
	}
	for _, n := range controlDevices[1:] {
		matches = append(matches, filepath.Join(h.Path("/dev"), n))
	}
	for _, m := range matches {
		if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("simulated host %s: %w", h.Dir, err)
		}
	}
	return nil
}

// installFiles models what the vendor installer leaves on disk: the
// driver's libraries, version file and npu-smi under DriverRoot. They
// survive reboots, as files on disk do.
func (h *Host) installFiles(st State) error {
	root := h.Path(DriverRoot)
	for _, d := range []string{"lib64/driver", "tools"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return fmt.Errorf("simulated host %s: %w", h.Dir, err)
		}
	}
	files := map[string]string{
		"version.info":                    "Version=" + st.LoadedDriver + "\n",
		"lib64/driver/libdrvdsmi_host.so": "",
		"tools/npu-smi":                   "",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("simulated host %s: %w", h.Dir, err)
		}
	}
	return nil
}
