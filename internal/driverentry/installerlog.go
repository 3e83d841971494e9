package driverentry

// What the vendor installer's output says about a refusal that no retry
// can get past: the NPUs' firmware or hardware does not allow the driver
// version. npu-stack neither installs nor upgrades NPU firmware
// (docs/host-contract.md, "NPU firmware"); Huawei's order is driver then
// firmware on a first install, firmware then driver on an overwrite
// install or upgrade (CANN Software Installation Guide, "Installing the
// NPU Driver and Firmware", the installation guide hicann/driver v8.5.0
// docs/zh/build.md l.70 points to for the firmware package).

import (
	"fmt"
	"regexp"
	"strings"
)

// Upstream's messages, hicann/driver v8.5.0 (scripts/package/custom/
// driver/common/scripts unless said otherwise).
const (
	// env_check.sh please_change_RC1driver_package() l.244-248, printed
	// by drvEcho (log_common.sh l.19-22) after "[WARNING]", then exitLog 1:
	// the firmware check check_pkg_firmware_version() (l.261-286, run by
	// every install unless --docker, l.452) found 910B firmware whose
	// version's second field is 11, read from the chips' PCI BAR on a first
	// install (check_firmware_version_bybar() l.250-259) or from
	// <install path>/firmware/version.info over an installed driver
	// (check_firmware_version_byfile() l.237-242).
	msgFirmwareStep = "Download and install the 23.0.RC1 driver package. Then upgrade to the target version."
	// run_driver_upgrade_check.sh show_version_suggestion() l.368-386 and
	// compare_and_tell_base_version() l.467-472, printed in red by
	// logger_error -c (l.52) to the installer's output (ascend_driver_config.sh
	// do_upgrade_check() l.396-414, on an install over an installed driver):
	// the package is older than what the NPUs allow, by the driver version
	// their flash records (upgrade-tool --hw_base_version, mapped through
	// the installed tree's version_cap.map, l.408-425), their optical
	// modules (l.447-465) or their HBM (l.507-525). Then fail_exit() l.388-394.
	msgDeviceMinimum = "Version check does not match, please use "
	// scripts/package/driver/common/scripts/ver_check.sh l.120: without
	// --quiet the installer asks, after "driver and firmware version
	// relationship check fail" (l.114), whether to go on; it reads the
	// answer from its standard input, which the driver pod does not give.
	msgFirmwareMismatchPrompt = "driver required firmware version not match"
)

// deviceMinimum takes what upstream tells to use: "version <v> or later",
// "<v> or later" or "a newer version".
var deviceMinimum = regexp.MustCompile(regexp.QuoteMeta(msgDeviceMinimum) + `(.+?)\.\s*$`)

// installerRefusal explains, from the vendor installer's outputs, a
// refusal of driver version caused by the NPUs' firmware or hardware, in
// upstream's words and with the fix; "" when the output shows none.
func installerRefusal(version string, outs ...[]byte) string {
	for _, o := range outs {
		for _, line := range strings.Split(ansi.ReplaceAllString(string(o), ""), "\n") {
			line = strings.TrimSpace(line)
			switch {
			case strings.Contains(line, msgFirmwareStep):
				return fmt.Sprintf("the vendor installer refused driver %s because of the NPU firmware (its firmware check, hicann/driver env_check.sh check_pkg_firmware_version, found firmware from which this driver cannot be installed directly) and says: %q; npu-stack does not install or upgrade NPU firmware or intermediate drivers: do what the installer says on this node outside npu-stack (Huawei's order for an upgrade: firmware, then driver), then delete this driver pod to retry",
					version, msgFirmwareStep)
			case deviceMinimum.MatchString(line):
				need := deviceMinimum.FindStringSubmatch(line)[1]
				return fmt.Sprintf("the NPUs of this node do not allow driver %s: the vendor installer's upgrade check says %q (hicann/driver run_driver_upgrade_check.sh: the oldest driver the NPUs' flash, set by their firmware, or their optical modules or HBM accept); no retry can install it here: set driver.version to %s (a rollback below it cannot succeed on this node)",
					version, msgDeviceMinimum+need+".", need)
			case strings.Contains(line, msgFirmwareMismatchPrompt):
				return fmt.Sprintf("the vendor installer found that driver %s does not match the installed NPU firmware (%q, hicann/driver ver_check.sh) and asked whether to continue, with nobody to answer: upgrade the NPU firmware to the one driver %s requires first, outside npu-stack (Huawei's order for an upgrade: firmware, then driver), or add --quiet to driver.installCommand, with which the installer only warns",
					version, msgFirmwareMismatchPrompt, version)
			}
		}
	}
	return ""
}
