package driverentry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

// An installer dying half-way: the error on the node (event naming node,
// fix and next try, driver-ready=false), no marker, no reboot asked, and
// Run waits for its own retry, not Ready, instead of exiting.
func TestInstallFailingHalfWay(t *testing.T) {
	cfg, d, h, ev := setup(t, "")
	if err := h.Update(func(st *simhost.State) error {
		st.InstallFailure = "ERR_NO:0x0091;ERR_DES:HwHiAiUser not exists!"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	stop := run(t, cfg, d)
	// Run reports on the node, then waits for its retry: the status is
	// the sign it got there.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := d.Watch.Until(ctx, "n1", func(n *corev1.Node) bool {
		return strings.HasPrefix(n.Annotations[cfg.Keys.InstallStatus()], "failed: ")
	}); err != nil {
		t.Fatalf("no failure recorded on the node: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run on shutdown: %v", err)
	}
	if len(ev.got) != 1 || !strings.HasPrefix(ev.got[0], "DriverInstallFailed") {
		t.Fatalf("events %v", ev.got)
	}
	for _, w := range []string{"node n1", "driver 25.5.0", "HwHiAiUser not exists", "next try in 30s", "kubectl delete pod -n <namespace> -l app=npu-driver-daemonset --field-selector spec.nodeName=n1", "no reboot is requested"} {
		if !strings.Contains(ev.got[0], w) {
			t.Errorf("event %q lacks %q", ev.got[0], w)
		}
	}
	n, _ := d.Nodes.Get(context.Background(), "n1")
	if n.Labels[cfg.Keys.DriverReady()] != "false" || n.Labels[cfg.Keys.RebootRequired()] != "" {
		t.Errorf("labels %v: want driver-ready=false and no reboot-required", n.Labels)
	}
	if _, ok, _ := cfg.Markers.Ready(); ok {
		t.Error("driver-ready marker written after a failed install")
	}
	if st, _ := h.State(); st.Installs != 1 || st.LoadedDriver != "" || st.RebootRequest != "" {
		t.Errorf("host after the failure: %d installs, loaded %q, reboot %q; want one install, nothing loaded, no reboot", st.Installs, st.LoadedDriver, st.RebootRequest)
	}
}

// KubeOS with the default driver path: refused before anything runs,
// naming node, path and the profile fix.
func TestReadOnlyDriverPathRefusedBeforeInstalling(t *testing.T) {
	cfg, d, _, ev := setup(t, "")
	kubeos, err := simhost.Create(t.TempDir(), simhost.Spec{Chip: "910b", ChipCount: 8, DriverRoot: "/var/lib/Ascend/driver", ReadOnly: []string{"/usr"}})
	if err != nil {
		t.Fatal(err)
	}
	d.Host = simhost.OpenAs(kubeos.Dir, host.NewLinux("/")) // the chart's default hostDriverPath
	_, err = Prepare(context.Background(), cfg, d)
	if _, ok := host.IsProblem(err); !ok {
		t.Fatalf("Prepare = %v; want the host problem", err)
	}
	for _, w := range []string{"node n1", "/usr/local/Ascend/driver", "read-only", "hostDriverPath", "/var/lib/Ascend/driver"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if st, _ := kubeos.State(); st.Installs != 0 {
		t.Errorf("the installer ran %d times on a read-only driver path", st.Installs)
	}
	var re *RetryError
	if !errors.As(err, &re) || re.Reason != contract.EventDriverInstallFailed || len(ev.got) != 0 {
		t.Errorf("error %#v, events %v; want a DriverInstallFailed for the retry to announce", err, ev.got)
	}
}
