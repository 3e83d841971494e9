package driverentry

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

// What the vendor installer prints, line by line, built from hicann/driver
// v8.5.0's format strings (scripts/package/custom/driver/common/scripts
// unless said otherwise); the dates are what `date +"%Y-%m-%d %H:%M:%S"`
// and printf's %(%F %T)T print.
const (
	// env_check.sh please_change_RC1driver_package() l.244-248: drvEcho
	// (log_common.sh l.19-22) "[WARNING]…" (with its trailing space), then
	// exitLog 1 (log_common.sh l.24-29).
	outFirmwareStep = "[Driver] [2026-05-04 10:11:12] [WARNING]Download and install the 23.0.RC1 driver package. Then upgrade to the target version. \n" +
		"[Driver] [2026-05-04 10:11:12] [INFO]End time: 2026-05-04 10:11:12\n"
	// run_driver_upgrade_check.sh: show_version_suggestion() l.384-385
	// (the -q line goes to the log file only) and fail_exit() l.390-391,
	// through logger_log l.52: "[Driver] [%(%F %T)T] [%s] \e[31m%s\e[0m".
	outFlashMinimum = "[Driver] [2026-05-04 10:11:12] [ERROR] \x1b[31mVersion check does not match, please use version 25.2.0 or later.\x1b[0m\n" +
		"[Driver] [2026-05-04 10:11:12] [ERROR] \x1b[31mDriver upgrade failed, details in /var/log/ascend_seclog/ascend_install.log\x1b[0m\n"
	// compare_and_tell_base_version() l.470 (optical modules, HBM).
	outHardwareMinimum = "[Driver] [2026-05-04 10:11:12] [ERROR] \x1b[31mVersion check does not match, please use 23.0.7 or later.\x1b[0m\n" +
		"[Driver] [2026-05-04 10:11:12] [ERROR] \x1b[31mDriver upgrade failed, details in /var/log/ascend_seclog/ascend_install.log\x1b[0m\n"
	// show_version_suggestion() l.382 without a usable version_cap.map.
	outNewerVersion = "[Driver] [2026-05-04 10:11:12] [ERROR] \x1b[31mVersion check does not match, please use a newer version.\x1b[0m\n"
	// scripts/package/driver/common/scripts/ver_check.sh l.114 (drvEcho,
	// l.31-34), l.120 and l.130, reading an answer from an empty stdin.
	outFirmwarePrompt = "[Driver] [2026-05-04 10:11:12] [WARNING]driver and firmware version relationship check fail\n" +
		"[WARNING]driver required firmware version not match ,do you want to continue?  [y/n] \n" +
		"ERR_NO:0x0002;ERR_DES:input error, please input again!\n" +
		"ERR_NO:0x0002;ERR_DES:input error, please input again!\n"
	// driver_install.sh exitInstallInfo(): not a firmware matter.
	outOccupied = "[Driver] [2026-05-04 10:11:12] [ERROR]\x1b[31mThe davinci nodes are occupied by some processes, please stop processes and install or uninstall again, details in : /var/log/ascend_seclog/ascend_install.log \x1b[0m\n"
	// ver_check.sh with --quiet: a warning, and the install goes on; a
	// later failure is not the firmware's.
	outQuietMismatch = "[Driver] [2026-05-04 10:11:12] [WARNING]driver and firmware version relationship check fail\n" +
		"[Driver] [2026-05-04 10:11:12] [ERROR]ERR_NO:0x0091;ERR_DES:HwHiAiUser not exists! Please add HwHiAiUser\n"
)

func TestInstallerRefusal(t *testing.T) {
	for name, tc := range map[string]struct {
		out  string
		want []string // nil: no refusal of firmware or hardware
	}{
		"firmware needs an intermediate driver": {outFirmwareStep, []string{"refused driver 25.5.0 because of the NPU firmware", `"Download and install the 23.0.RC1 driver package. Then upgrade to the target version."`, "check_pkg_firmware_version", "does not install or upgrade NPU firmware", "firmware, then driver"}},
		"flash requires a newer driver":         {outFlashMinimum, []string{"do not allow driver 25.5.0", `"Version check does not match, please use version 25.2.0 or later."`, "set driver.version to version 25.2.0 or later", "firmware"}},
		"optical modules or HBM":                {outHardwareMinimum, []string{"set driver.version to 23.0.7 or later", "rollback"}},
		"no version_cap.map":                    {outNewerVersion, []string{"set driver.version to a newer version"}},
		"firmware mismatch asks a question":     {outFirmwarePrompt, []string{"does not match the installed NPU firmware", "driver required firmware version not match", "--quiet", "firmware, then driver"}},
		"devices held":                          {outOccupied, nil},
		"quiet mismatch, other failure":         {outQuietMismatch, nil},
		"nothing":                               {"", nil},
	} {
		t.Run(name, func(t *testing.T) {
			got := installerRefusal("25.5.0", []byte(tc.out))
			if tc.want == nil {
				if got != "" {
					t.Fatalf("not a firmware or hardware refusal, explained as %q", got)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
		})
	}
	// Stderr counts as much as stdout.
	if got := installerRefusal("25.5.0", nil, []byte(outFirmwareStep)); got == "" {
		t.Error("the refusal on stderr was not read")
	}
}

// An installer refused by the firmware check: the DriverInstallFailed
// event and the node's status name firmware, upstream's words and the
// order, instead of the installer's useless last line ("End time").
func TestInstallRefusedByFirmware(t *testing.T) {
	cfg, d, h, ev := setup(t, "")
	if err := h.Update(func(st *simhost.State) error {
		st.InstallFailure = strings.TrimSuffix(outFirmwareStep, "\n")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	stop := run(t, cfg, d)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := d.Watch.Until(ctx, "n1", func(n *corev1.Node) bool {
		return strings.HasPrefix(n.Annotations[cfg.Keys.InstallStatus()], "failed: ")
	})
	if err != nil {
		t.Fatalf("no failure recorded on the node: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run on shutdown: %v", err)
	}
	if len(ev.got) != 1 || !strings.HasPrefix(ev.got[0], "DriverInstallFailed") {
		t.Fatalf("events %v", ev.got)
	}
	for _, got := range []string{ev.got[0], n.Annotations[cfg.Keys.InstallStatus()]} {
		for _, w := range []string{"node n1", "driver 25.5.0", "because of the NPU firmware", "Download and install the 23.0.RC1 driver package", "firmware, then driver"} {
			if !strings.Contains(got, w) {
				t.Errorf("%q lacks %q", got, w)
			}
		}
		if strings.Contains(got, "fix the driver image or driver.installCommand") {
			t.Errorf("%q blames the image for the firmware", got)
		}
	}
}
