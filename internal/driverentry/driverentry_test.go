package driverentry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/kube/kubetest"
	"github.com/openfuyao/npu-stack/internal/marker"
)

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		loaded, desired string
		want            Plan
	}{
		{"", "25.5.0", Plan{Install: true, Desired: "25.5.0", Loaded: "25.5.0"}},
		{"25.5.0", "25.5.0", Plan{Desired: "25.5.0", Loaded: "25.5.0"}},
		{"25.3.0", "25.5.0", Plan{Desired: "25.5.0", Loaded: "25.3.0", Pending: true}},
		{"25.5.0", "25.3.0", Plan{Desired: "25.3.0", Loaded: "25.5.0", Pending: true}}, // rollback waits for a reboot too
	} {
		if got := Decide(tc.loaded, tc.desired); got != tc.want {
			t.Errorf("Decide(%q, %q) = %+v, want %+v", tc.loaded, tc.desired, got, tc.want)
		}
	}
}

type events struct{ got []string }

func (e *events) Node(_ *corev1.Node, _ bool, reason contract.EventReason, format string, args ...any) {
	e.got = append(e.got, string(reason)+": "+fmt.Sprintf(format, args...))
}

type failingInstall struct{ *simhost.Host }

func (failingInstall) InstallDriver(context.Context, string, []string) error {
	return errors.New("install.sh exited with code 3")
}

func setup(t *testing.T, loaded string) (Config, Deps, *simhost.Host, *events) {
	t.Helper()
	h, err := simhost.Create(t.TempDir(), simhost.Spec{Chip: "910b", ChipCount: 8, Driver: loaded})
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := contract.NewKeys(contract.DefaultDomain)
	ev := &events{}
	log := logrus.New()
	log.SetOutput(io.Discard)
	cfg := Config{
		NodeName: "n1", Keys: keys, DriverVersion: "25.5.0", DriverRoot: h.Path("/usr/local/Ascend/driver"),
		Markers: marker.Dir{Path: h.Path("/run/npu-stack")}, InstallCommand: []string{"/install.sh", "--full"},
	}
	nodes := kubetest.NewNodes(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	d := Deps{Nodes: nodes, Watch: nodes, Host: h, Events: ev, Log: log}
	return cfg, d, h, ev
}

func label(t *testing.T, d Deps) string {
	t.Helper()
	n, err := d.Nodes.Get(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	return n.Labels["npu.openfuyao.com/driver-version"]
}

func TestPrepareFreshBootInstalls(t *testing.T) {
	cfg, d, h, ev := setup(t, "")
	if _, err := Prepare(context.Background(), cfg, d); err != nil {
		t.Fatal(err)
	}
	st, _ := h.State()
	if st.Installs != 1 || st.LoadedDriver != "25.5.0" || strings.Join(st.LastInstallCommand, " ") != "/install.sh --full" {
		t.Fatalf("host after install: %+v", st)
	}
	if v, ok, _ := cfg.Markers.Ready(); !ok || v != "25.5.0" {
		t.Fatalf("marker %q %v", v, ok)
	}
	if n, ok, _ := cfg.Markers.ChipsAtLoad(); !ok || n != 8 {
		t.Fatalf("chips at load %d %v", n, ok)
	}
	if got := label(t, d); got != "25.5.0" {
		t.Fatalf("label %q", got)
	}
	if len(ev.got) != 1 || !strings.HasPrefix(ev.got[0], "DriverLoaded") {
		t.Fatalf("events %v", ev.got)
	}
}

func TestPrepareSameVersionRecordsOnly(t *testing.T) {
	cfg, d, h, _ := setup(t, "25.5.0")
	if _, err := Prepare(context.Background(), cfg, d); err != nil {
		t.Fatal(err)
	}
	if st, _ := h.State(); st.Installs != 0 {
		t.Fatal("installed over a loaded driver")
	}
	if v, ok, _ := cfg.Markers.Ready(); !ok || v != "25.5.0" || label(t, d) != "25.5.0" {
		t.Fatalf("marker %q %v label %q", v, ok, label(t, d))
	}
}

func TestPrepareOtherVersionIdlesOnTheLoadedOne(t *testing.T) {
	cfg, d, h, ev := setup(t, "25.3.0")
	plan, err := Prepare(context.Background(), cfg, d)
	if err != nil || !plan.Pending || !plan.NeedsInstall() {
		t.Fatalf("plan %+v, %v", plan, err)
	}
	if st, _ := h.State(); st.Installs != 0 || st.LoadedDriver != "25.3.0" {
		t.Fatalf("touched the running driver: %+v", st)
	}
	if v, ok, _ := cfg.Markers.Ready(); !ok || v != "25.3.0" || label(t, d) != "25.3.0" || annotation(t, d, cfg.Keys.InstalledDriver()) != "25.3.0" {
		t.Fatalf("marker %q %v label %q installed %q; want the loaded 25.3.0", v, ok, label(t, d), annotation(t, d, cfg.Keys.InstalledDriver()))
	}
	if len(ev.got) != 1 || !strings.Contains(ev.got[0], "driver 25.5.0 is installed once the rollout has drained the node") {
		t.Fatalf("events %v", ev.got)
	}
}

func annotation(t *testing.T, d Deps, key string) string {
	t.Helper()
	n, err := d.Nodes.Get(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	return n.Annotations[key]
}

// run starts Run and returns a stop that ends it and returns its error.
func run(t *testing.T, cfg Config, d Deps) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, d) }()
	return func() error { cancel(); return <-done }
}

// waitAnnotation waits, by the node's own changes, for key to be want.
func waitAnnotation(t *testing.T, d Deps, key, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := d.Watch.Until(ctx, "n1", func(n *corev1.Node) bool { return n.Annotations[key] == want }); err != nil {
		t.Fatalf("annotation %s never became %q: %v", key, want, err)
	}
}

// A pending version is installed over the loaded one only once the
// rollout has drained the node and asks for its reboot; the loaded
// version stays what the node reports until that reboot, even after the
// install rewrote version.info and the driver pod restarted; the boot
// then loads the installed version and the entry installs nothing more.
func TestPendingVersionInstalledAtTheReboot(t *testing.T) {
	cfg, d, h, ev := setup(t, "25.3.0")
	stop := run(t, cfg, d)
	waitAnnotation(t, d, cfg.Keys.InstalledDriver(), "25.3.0")
	// Drained and cordoned, but no reboot asked yet: nothing installed.
	if _, err := d.Nodes.Patch(context.Background(), "n1", kube.NodeChange{Labels: map[string]*string{cfg.Keys.UpgradeState(): kube.Set("drain-required")}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := h.State(); st.Installs != 0 {
		t.Fatalf("installed over the loaded driver before the reboot was asked for: %+v", st)
	}
	if _, err := d.Nodes.Patch(context.Background(), "n1", kube.NodeChange{Labels: map[string]*string{
		cfg.Keys.UpgradeState(): kube.Set("reboot-required"), cfg.Keys.RebootRequired(): kube.Set("true")}}); err != nil {
		t.Fatal(err)
	}
	waitAnnotation(t, d, cfg.Keys.InstalledDriver(), "25.5.0")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st, _ := h.State()
	if st.Installs != 1 || st.LoadedDriver != "25.3.0" || st.InstalledDriver != "25.5.0" {
		t.Fatalf("host after the install over the loaded driver: %+v; want 25.3.0 loaded, 25.5.0 installed", st)
	}
	if !strings.HasPrefix(ev.got[len(ev.got)-1], "DriverActivationPending: driver 25.5.0 installed on the drained node") {
		t.Fatalf("events %v", ev.got)
	}
	// A replaced driver pod in the same boot: version.info says 25.5.0,
	// the kernel still runs 25.3.0.
	plan, err := Prepare(context.Background(), cfg, d)
	if err != nil || !plan.Pending || plan.NeedsInstall() || plan.Installed != "25.5.0" || plan.Loaded != "25.3.0" || label(t, d) != "25.3.0" {
		t.Fatalf("after the install, same boot: plan %+v, %v, label %q; want 25.3.0 still loaded, 25.5.0 staged", plan, err, label(t, d))
	}
	if st, _ := h.State(); st.Installs != 1 {
		t.Fatalf("installed again in the same boot: %+v", st)
	}
	// The reboot loads what is installed.
	if err := h.Reboot(context.Background(), "systemd"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.CompleteReboot(); err != nil {
		t.Fatal(err)
	}
	plan, err = Prepare(context.Background(), cfg, d)
	if err != nil || plan.Pending || plan.Install || label(t, d) != "25.5.0" || annotation(t, d, cfg.Keys.InstalledDriver()) != "25.5.0" {
		t.Fatalf("after the reboot: plan %+v, %v, label %q; want 25.5.0 loaded by the boot", plan, err, label(t, d))
	}
	if st, _ := h.State(); st.Installs != 1 {
		t.Fatalf("installed again after the reboot: %+v", st)
	}
}

// An install over the loaded driver that fails names the node, the
// version and that the node is not rebooted for it, and records nothing
// as installed.
func TestPendingInstallFailureHoldsTheReboot(t *testing.T) {
	cfg, d, h, ev := setup(t, "25.3.0")
	if err := h.Update(func(st *simhost.State) error {
		st.InstallFailure = "ERR_NO:0x0080;ERR_DES: The davinci nodes are occupied"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Nodes.Patch(context.Background(), "n1", kube.NodeChange{Labels: map[string]*string{
		cfg.Keys.UpgradeState(): kube.Set("reboot-required"), cfg.Keys.RebootRequired(): kube.Set("true")}}); err != nil {
		t.Fatal(err)
	}
	stop := run(t, cfg, d)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := d.Watch.Until(ctx, "n1", func(n *corev1.Node) bool {
		return n.Labels[cfg.Keys.DriverReady()] == "false" && strings.HasPrefix(n.Annotations[cfg.Keys.InstallStatus()], "failed: ")
	}); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Neither the loaded 25.3.0 (the tree no longer holds it whole) nor the
	// target: the rebooter waits, and the rollout does not count the node.
	if got := annotation(t, d, cfg.Keys.InstalledDriver()); got != contract.InstalledIncomplete {
		t.Fatalf("installed-version %q after a failed install; want %q, which the rebooter never reboots into 25.5.0 for", got, contract.InstalledIncomplete)
	}
	if got := annotation(t, d, cfg.Keys.InstallStatus()); !strings.HasPrefix(got, "failed: ") || !strings.Contains(got, "next try at") {
		t.Errorf("install-status %q; want the failure and the next try", got)
	}
	last := ev.got[len(ev.got)-1]
	for _, w := range []string{"DriverInstallFailed", "node n1", "driver 25.5.0", "davinci nodes are occupied", "the rebooter does not reboot the node"} {
		if !strings.Contains(last, w) {
			t.Errorf("event %q lacks %q", last, w)
		}
	}
}

func TestPrepareInstallFailureNamesNodeAndVersion(t *testing.T) {
	cfg, d, h, ev := setup(t, "")
	d.Host = failingInstall{h}
	_, err := Prepare(context.Background(), cfg, d)
	if err == nil || !strings.Contains(err.Error(), "node n1") || !strings.Contains(err.Error(), "driver 25.5.0") || !strings.Contains(err.Error(), "code 3") {
		t.Fatalf("error %v", err)
	}
	if _, ok, _ := cfg.Markers.Ready(); ok {
		t.Fatal("marker written after a failed install")
	}
	var re *RetryError
	if !errors.As(err, &re) || re.Reason != contract.EventDriverInstallFailed || len(ev.got) != 0 {
		t.Fatalf("error %#v, events %v; want a DriverInstallFailed to retry, announced by the retry", err, ev.got)
	}
}

func TestPrepareLeavesAWedgedBootsMarkerToTheWatch(t *testing.T) {
	cfg, d, _, _ := setup(t, "25.5.0")
	_ = cfg.Markers.RecordWedge("chip 1 Critical")
	if _, err := Prepare(context.Background(), cfg, d); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := cfg.Markers.Ready(); ok {
		t.Fatal("driver entry re-advertised wedged chips")
	}
}

func TestValidate(t *testing.T) {
	cfg, _, _, _ := setup(t, "")
	for _, bad := range []func(*Config){
		func(c *Config) { c.NodeName = "" },
		func(c *Config) { c.DriverVersion = "" },
		func(c *Config) { c.InstallCommand = nil },
	} {
		c := cfg
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

// A rollback before the reboot: 25.5.0 was installed over the loaded
// 25.3.0, then 25.3.0 is desired again. The disk must hold what runs, or
// the next boot (planned or not) loads 25.5.0: the pod reports the disk's
// version and installs 25.3.0 again on the drained node.
func TestRollbackBeforeTheRebootInstallsTheLoadedVersionAgain(t *testing.T) {
	cfg, d, h, _ := setup(t, "25.3.0")
	if _, err := d.Nodes.Patch(context.Background(), "n1", kube.NodeChange{Labels: map[string]*string{
		cfg.Keys.UpgradeState(): kube.Set("reboot-required"), cfg.Keys.RebootRequired(): kube.Set("true")}}); err != nil {
		t.Fatal(err)
	}
	stop := run(t, cfg, d)
	waitAnnotation(t, d, cfg.Keys.InstalledDriver(), "25.5.0")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	back := cfg
	back.DriverVersion = "25.3.0"
	plan, err := Prepare(context.Background(), back, d)
	if err != nil || plan.Pending || !plan.NeedsInstall() || plan.Installed != "25.5.0" || annotation(t, d, cfg.Keys.InstalledDriver()) != "25.5.0" {
		t.Fatalf("rolled back before the reboot: plan %+v, %v, installed-version %q; want 25.3.0 loaded, 25.5.0 on disk and reported", plan, err, annotation(t, d, cfg.Keys.InstalledDriver()))
	}
	stop = run(t, back, d)
	waitAnnotation(t, d, cfg.Keys.InstalledDriver(), "25.3.0")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st, _ := h.State(); st.Installs != 2 || st.LoadedDriver != "25.3.0" || st.InstalledDriver != "25.3.0" {
		t.Fatalf("host after the rollback's install: %+v; want 25.3.0 loaded and on disk", st)
	}
}
