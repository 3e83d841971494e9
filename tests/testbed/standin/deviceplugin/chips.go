// Package deviceplugin is the test bed's stand-in for the MindCluster
// v7.3.0 Ascend device plugin (Ascend/mind-cluster v7.3.0,
// component/ascend-device-plugin): it registers with the kubelet through
// the device-plugin API, advertises huawei.com/Ascend910 or
// huawei.com/Ascend310P per chip with each chip's health, hands a
// container the chips' device nodes ("origin mount way", pkg/server/
// plugin.go Allocate), and writes its mindx-dl-deviceinfo-<node>
// ConfigMap in kube-system as v7.3.0 does. It reads the chips through the
// driver's libdcmi.so (dcmi-query, loaded from LD_LIBRARY_PATH as
// upstream's dcmi.go does), so without the driver's libraries it has no
// chips. Only what the chart depends on is modelled.
package deviceplugin

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// Chip is one chip as libdcmi.so reports it.
type Chip struct {
	LogicID, PhyID int
	// Health is DCMI's health code: 0 OK, 1 Warning, 2 Alarm,
	// 3 Critical, 4 unknown (hicann/driver npu_common.c
	// npu_common_get_health_state_str).
	Health uint
	// Name is the chip name (dcmi_get_device_chip_info), e.g. 910B3.
	Name string
}

// Healthy is the stand-in plugin's health of a chip: OK and Warning chips
// compute, an Alarm, Critical or unknown one does not (as internal/npusmi's
// Health.Usable). Upstream derives a chip's health from the fault events
// and codes dcmi reports (pkg/device/ascend910.go), which the stand-in
// driver has none of; its health code is what it reports.
func (c Chip) Healthy() bool { return c.Health <= 1 }

// DeviceType is the plugin's device type for the chip: Ascend310P for a
// 310P chip, Ascend910 otherwise (910B and A3 are advertised as
// huawei.com/Ascend910: Ascend/mind-cluster v7.3.0
// component/ascend-common/api/default_name.go).
func (c Chip) DeviceType() string {
	if strings.Contains(c.Name, "310P") {
		return "Ascend310P"
	}
	return "Ascend910"
}

// DeviceName is the device's ID towards the kubelet and in the
// ConfigMap: <type>-<physical ID> (pkg/device/ascendcommon.go
// convertLogicIDsToDeviceNames).
func (c Chip) DeviceName() string { return fmt.Sprintf("%s-%d", c.DeviceType(), c.PhyID) }

// Query runs dcmi-query and parses its lines.
func Query(ctx context.Context, dcmiQuery string) ([]Chip, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, dcmiQuery)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("query the chips through libdcmi.so (%s): %w: %s", dcmiQuery, err, strings.TrimSpace(stderr.String()))
	}
	return ParseQuery(out)
}

// ParseQuery reads dcmi-query's "<logic> <phy> <health> <name>" lines.
func ParseQuery(out []byte) ([]Chip, error) {
	var chips []Chip
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 4 {
			return nil, fmt.Errorf("dcmi-query line %q: want <logic id> <phy id> <health> <name>", sc.Text())
		}
		var c Chip
		var err error
		if c.LogicID, err = strconv.Atoi(f[0]); err != nil {
			return nil, fmt.Errorf("dcmi-query line %q: %w", sc.Text(), err)
		}
		if c.PhyID, err = strconv.Atoi(f[1]); err != nil {
			return nil, fmt.Errorf("dcmi-query line %q: %w", sc.Text(), err)
		}
		h, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("dcmi-query line %q: %w", sc.Text(), err)
		}
		c.Health, c.Name = uint(h), f[3]
		chips = append(chips, c)
	}
	if len(chips) == 0 {
		return nil, fmt.Errorf("dcmi-query found no chips")
	}
	return chips, nil
}
