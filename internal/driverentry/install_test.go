package driverentry

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/kube/kubetest"
)

// drained puts the node where the rollout asks the driver pod to install.
func drained(t *testing.T, cfg Config, d Deps) {
	t.Helper()
	if _, err := d.Nodes.Patch(context.Background(), "n1", kube.NodeChange{Labels: map[string]*string{
		cfg.Keys.UpgradeState(): kube.Set("reboot-required"), cfg.Keys.RebootRequired(): kube.Set("true")}}); err != nil {
		t.Fatal(err)
	}
}

func waitNode(t *testing.T, d Deps, what string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := d.Watch.Until(ctx, "n1", cond)
	if err != nil {
		t.Fatalf("node never %s: %v", what, err)
	}
	return n
}

// stopper records what the chips' holders saw when they were stopped.
type stopper struct {
	cfg   Config
	calls int
	// heldFirst: the hold marker existed and the ready marker did not
	// when the pods were deleted, so their replacements wait.
	heldFirst bool
}

func (s *stopper) Stop(context.Context, string) ([]string, []string, error) {
	s.calls++
	_, held, _ := s.cfg.Markers.Hold()
	_, ready, _ := s.cfg.Markers.Ready()
	s.heldFirst = held && !ready
	return []string{"npu/plugin-x"}, nil, nil
}

// Before installing over the loaded driver the pod takes readiness away
// and holds the chips (health probes paused), then deletes the pods that
// open them; after the install nothing of ours comes back before the
// reboot, even in a replaced driver pod.
func TestInstallOverStopsHoldersFirstAndHoldsUntilTheReboot(t *testing.T) {
	cfg, d, h, ev := setup(t, "25.3.0")
	s := &stopper{cfg: cfg}
	d.Pods = s
	stop := run(t, cfg, d)
	waitAnnotation(t, d, cfg.Keys.InstalledDriver(), "25.3.0")
	drained(t, cfg, d)
	n := waitNode(t, d, "installed", func(n *corev1.Node) bool { return n.Annotations[cfg.Keys.InstalledDriver()] == "25.5.0" })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s.calls != 1 || !s.heldFirst {
		t.Fatalf("pods stopped %d times, hold before deletion %v; want once, after the hold", s.calls, s.heldFirst)
	}
	if n.Labels[cfg.Keys.DriverReady()] != "false" || !strings.HasPrefix(n.Annotations[cfg.Keys.InstallStatus()], "installed 25.5.0") {
		t.Fatalf("node %v %v; want driver-ready=false and the install recorded", n.Labels, n.Annotations)
	}
	if !strings.Contains(strings.Join(ev.got, "\n"), "NPUPodsStopped: node n1: deleted pod(s) npu/plugin-x") {
		t.Fatalf("events %v", ev.got)
	}
	// A replaced driver pod in the same boot keeps the chips held.
	if _, err := Prepare(context.Background(), cfg, d); err != nil {
		t.Fatal(err)
	}
	if _, ready, _ := cfg.Markers.Ready(); ready {
		t.Fatal("driver-ready marker written again before the reboot: the device plugin would open the chips")
	}
	if got := annotation(t, d, cfg.Keys.InstallStatus()); got == "" {
		t.Fatal("install status removed before the reboot")
	}
	// The reboot empties /run: the hold is gone, the new driver ready.
	if err := h.Reboot(context.Background(), "systemd"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.CompleteReboot(); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(context.Background(), cfg, d); err != nil {
		t.Fatal(err)
	}
	if v, ready, _ := cfg.Markers.Ready(); !ready || v != "25.5.0" || annotation(t, d, cfg.Keys.InstallStatus()) != "" {
		t.Fatalf("after the reboot: marker %q %v, status %q; want 25.5.0 ready and no status", v, ready, annotation(t, d, cfg.Keys.InstallStatus()))
	}
}

// A rollback before the install happened (the hold taken, the install
// blocked) leaves nothing to install: the chips are given back.
func TestHoldReleasedWhenNothingIsLeftToInstall(t *testing.T) {
	cfg, d, _, _ := setup(t, "25.3.0")
	if err := cfg.Markers.SetHold("25.5.0"); err != nil {
		t.Fatal(err)
	}
	cfg.DriverVersion = "25.3.0"
	if _, err := Prepare(context.Background(), cfg, d); err != nil {
		t.Fatal(err)
	}
	if _, held, _ := cfg.Markers.Hold(); held {
		t.Fatal("hold kept with nothing to install")
	}
	if v, ready, _ := cfg.Markers.Ready(); !ready || v != "25.3.0" {
		t.Fatalf("marker %q %v; want 25.3.0 ready again", v, ready)
	}
}

// A failed install is retried by the pod itself with backoff, and
// succeeds once what failed it is gone: no command from anyone.
func TestFailedInstallRetriedWithBackoff(t *testing.T) {
	cfg, d, h, ev := setup(t, "25.3.0")
	clk := clocktesting.NewFakeClock(time.Now())
	d.Clock = clk
	cfg.Retry = Backoff{Initial: 10 * time.Second, Max: 15 * time.Second}
	if err := h.Update(func(st *simhost.State) error { st.InstallFailure = "ERR_NO:0x0080"; return nil }); err != nil {
		t.Fatal(err)
	}
	drained(t, cfg, d)
	stop := run(t, cfg, d)
	waitNode(t, d, "failed", func(n *corev1.Node) bool {
		return strings.Contains(n.Annotations[cfg.Keys.InstallStatus()], "next try at")
	})
	if err := h.Update(func(st *simhost.State) error { st.InstallFailure = ""; return nil }); err != nil {
		t.Fatal(err)
	}
	for !clk.HasWaiters() {
		runtime.Gosched() // the retry's timer is being set
	}
	clk.Step(10 * time.Second)
	waitAnnotation(t, d, cfg.Keys.InstalledDriver(), "25.5.0")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st, _ := h.State(); st.Installs != 2 || st.InstalledDriver != "25.5.0" {
		t.Fatalf("host %+v; want a second install that succeeded", st)
	}
	if !strings.Contains(strings.Join(ev.got, "\n"), "DriverInstallFailed: node n1: driver 25.5.0 was not installed") {
		t.Fatalf("events %v", ev.got)
	}
	for _, tc := range []struct {
		attempt int
		want    time.Duration
	}{{0, 10 * time.Second}, {1, 15 * time.Second}, {5, 15 * time.Second}} {
		if got := cfg.Retry.Delay(tc.attempt); got != tc.want {
			t.Errorf("Delay(%d) = %s, want %s", tc.attempt, got, tc.want)
		}
	}
}

// A half-installed tree (the overwrite install removed version.info and
// stopped) is installed again before anything else, named in an event,
// and never counted as installed until it is whole.
func TestHalfInstalledRepairedBeforeAnythingElse(t *testing.T) {
	cfg, d, h, ev := setup(t, "25.5.0")
	if err := os.Remove(h.Path("/usr/local/Ascend/driver/version.info")); err != nil {
		t.Fatal(err)
	}
	plan, err := Prepare(context.Background(), cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(ev.got, "\n")
	if !strings.Contains(all, "DriverInstallRepair: node n1: the driver is half-installed") || !strings.Contains(all, "version.info") {
		t.Fatalf("events %v", ev.got)
	}
	st, _ := h.State()
	if st.Installs != 1 || plan.Installed != "25.5.0" || plan.Loaded != UnknownVersion || label(t, d) != UnknownVersion {
		t.Fatalf("host %+v plan %+v label %q; want one repair install, the loaded version unknown until the reboot", st, plan, label(t, d))
	}
	if state, err := host.ReadInstallState(h.Path, "/usr/local/Ascend/driver"); err != nil || state.Half {
		t.Fatalf("after the repair: %+v %v", state, err)
	}
	if _, ready, _ := cfg.Markers.Ready(); ready {
		t.Fatal("ready marker written over a repaired tree the kernel has not loaded")
	}
}

// slowInstall blocks the installer until release closes, reporting the
// context it was given.
type slowInstall struct {
	*simhost.Host
	started chan context.Context
	release chan struct{}
}

func (s slowInstall) InstallDriver(ctx context.Context, version string, argv []string) error {
	s.started <- ctx
	select {
	case <-s.release:
		return s.Host.InstallDriver(ctx, version, argv)
	case <-ctx.Done():
		return &host.ExitError{Command: strings.Join(argv, " "), Code: -1, Output: []byte("killed")}
	}
}

// SIGTERM (Run's context ending) does not cut a running install short:
// it finishes and is recorded before Run returns.
func TestSIGTERMLetsTheInstallFinish(t *testing.T) {
	cfg, d, h, _ := setup(t, "25.3.0")
	slow := slowInstall{Host: h, started: make(chan context.Context, 1), release: make(chan struct{})}
	d.Host = slow
	drained(t, cfg, d)
	ctx, sigterm := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, d) }()
	ictx := <-slow.started
	sigterm() // cancels every context derived from ctx before it returns
	if ictx.Err() != nil {
		t.Fatal("the installer's context ended with the pod's")
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while the installer ran", err)
	default:
	}
	close(slow.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := annotation(t, d, cfg.Keys.InstalledDriver()); got != "25.5.0" {
		t.Fatalf("installed-driver-version %q after the install finished under SIGTERM; want 25.5.0", got)
	}
}

// A hung installer is stopped at its timeout and reported; nothing is
// recorded as installed, so nothing reboots.
func TestHungInstallerStoppedAtItsTimeout(t *testing.T) {
	cfg, d, h, _ := setup(t, "25.3.0")
	slow := slowInstall{Host: h, started: make(chan context.Context, 1), release: make(chan struct{})}
	d.Host = slow
	cfg.InstallTimeout = 50 * time.Millisecond
	node, _ := d.Nodes.Get(context.Background(), "n1")
	err := installOver(context.Background(), cfg, d, node, "upgrade")
	var re *RetryError
	if !errors.As(err, &re) || re.Reason != contract.EventDriverInstallFailed || !strings.Contains(err.Error(), "did not finish within 50ms (driver.installTimeoutSeconds) and was stopped") {
		t.Fatalf("error %v; want the timeout named", err)
	}
	if got := annotation(t, d, cfg.Keys.InstalledDriver()); got != contract.InstalledIncomplete {
		t.Fatalf("installed-driver-version %q; want %q", got, contract.InstalledIncomplete)
	}
}

// The event quotes the installer's error, not the hint it prints after.
func TestLastLineQuotesTheInstallersError(t *testing.T) {
	out := []byte("[Driver] [2026-11-28] [ERROR]\x1b[31mThe davinci nodes are occupied by some processes, please stop processes and install or uninstall again, details in : /var/log/ascend_seclog/ascend_install.log \x1b[0m\n" +
		"[Driver] [2026-11-28] [INFO]If you want to install or uninstall the driver forcibly, add the force parameter. For details, see [--help].\n")
	want := "[Driver] [2026-11-28] [ERROR]The davinci nodes are occupied by some processes, please stop processes and install or uninstall again, details in : /var/log/ascend_seclog/ascend_install.log"
	if got := lastLine(nil, out); got != want {
		t.Errorf("lastLine = %q\nwant %q", got, want)
	}
	if got := lastLine([]byte("step 1\nstep 2\n")); got != "step 2" {
		t.Errorf("lastLine without an error = %q", got)
	}
}

// waitSignal tells when a wait for a node condition starts unmet.
type waitSignal struct {
	*kubetest.Nodes
	unmet chan struct{}
}

func (w waitSignal) Until(ctx context.Context, name string, cond func(*corev1.Node) bool) (*corev1.Node, error) {
	if n, err := w.Get(ctx, name); err == nil && !cond(n) {
		select {
		case w.unmet <- struct{}{}:
		default:
		}
	}
	return w.Nodes.Until(ctx, name, cond)
}

// A retry waits for the rollout's request again: a node that left
// reboot-required while its install failed (the upgrade failed or was
// rolled back) does not have its pods stopped again.
func TestRetryWaitsWhileTheNodeIsNoLongerDrained(t *testing.T) {
	cfg, d, h, _ := setup(t, "25.3.0")
	s := &stopper{cfg: cfg}
	d.Pods = s
	nodes := d.Nodes.(*kubetest.Nodes)
	w := waitSignal{Nodes: nodes, unmet: make(chan struct{}, 1)}
	d.Watch = w
	clk := clocktesting.NewFakeClock(time.Now())
	d.Clock = clk
	cfg.Retry = Backoff{Initial: time.Second, Max: time.Second}
	if err := h.Update(func(st *simhost.State) error { st.InstallFailure = "ERR_NO:0x0080"; return nil }); err != nil {
		t.Fatal(err)
	}
	drained(t, cfg, d)
	stop := run(t, cfg, d)
	waitNode(t, d, "failed", func(n *corev1.Node) bool {
		return strings.HasPrefix(n.Annotations[cfg.Keys.InstallStatus()], "failed: ")
	})
	if _, err := d.Nodes.Patch(context.Background(), "n1", kube.NodeChange{Labels: map[string]*string{cfg.Keys.UpgradeState(): kube.Set("upgrade-failed")}}); err != nil {
		t.Fatal(err)
	}
	again := make(chan struct{})
	go func() {
		if _, err := nodes.Until(context.Background(), "n1", func(n *corev1.Node) bool {
			return strings.HasPrefix(n.Annotations[cfg.Keys.InstallStatus()], "stopping what holds the chips")
		}); err == nil {
			close(again)
		}
	}()
	for !clk.HasWaiters() {
		runtime.Gosched() // the retry's timer is being set
	}
	select {
	case <-w.unmet: // the test's own waits above
	default:
	}
	clk.Step(time.Second)
	select {
	case <-w.unmet: // the retry waits for reboot-required again
	case <-again:
		t.Fatal("the retry stopped the pods and installed on a node no longer in reboot-required")
	}
	if err := h.Update(func(st *simhost.State) error { st.InstallFailure = ""; return nil }); err != nil {
		t.Fatal(err)
	}
	drained(t, cfg, d)
	waitAnnotation(t, d, cfg.Keys.InstalledDriver(), "25.5.0")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s.calls != 2 {
		t.Fatalf("pods stopped %d times; want twice: before the failed install and once drained again", s.calls)
	}
}
