package reboot_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/openfuyao/npu-stack/internal/budget"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/reboot"
)

// confinedHost is a machine whose systemd the rebooter cannot reach, as
// under containerd's default AppArmor profile: every systemd reboot is
// refused with the host problem host.Linux reports; sysrq works.
type confinedHost struct {
	*simhost.Host
	mu    sync.Mutex
	tried []host.RebootMethod
}

func (h *confinedHost) Reboot(ctx context.Context, m host.RebootMethod) error {
	h.mu.Lock()
	h.tried = append(h.tried, m)
	h.mu.Unlock()
	if m == host.RebootSystemd {
		return &host.ProblemError{What: "AppArmor denies this container the host's D-Bus system bus", Fix: "set rebooter.appArmorProfile",
			Err: errors.New("An AppArmor policy prevents this sender from sending this message")}
	}
	return h.Host.Reboot(ctx, m)
}

func (h *confinedHost) methods() []host.RebootMethod {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]host.RebootMethod(nil), h.tried...)
}

// runAgent runs the rebooter for one plain node in its own namespace,
// in this process, until the test ends.
func runAgent(t *testing.T, ctx context.Context, attempts int, fallback host.RebootMethod) (string, *confinedHost) {
	t.Helper()
	ns, err := env.NewNamespace(ctx, "attempts")
	if err != nil {
		t.Fatal(err)
	}
	names, err := env.AddNodes(ctx, 1, "attempts", nil)
	if err != nil {
		t.Fatal(err)
	}
	sim, err := simhost.Create(t.TempDir(), simhost.Spec{Chip: "910b", ChipCount: 1, Driver: "25.5.0"})
	if err != nil {
		t.Fatal(err)
	}
	h := &confinedHost{Host: sim}
	log := logrus.New()
	log.SetOutput(t.Output())
	agent, err := reboot.New(reboot.Config{
		NodeName: names[0], Namespace: ns,
		Policy: reboot.Policy{Keys: keys, AutoUpgrade: true, Budget: budget.Budget{Max: 3, Window: time.Hour}},
		Method: host.RebootSystemd, FallbackMethod: fallback, RebootAttempts: attempts,
		NPUNodeSelector: labels.Everything(), Slots: 1, SlotTTL: time.Hour,
		Client: env.Client, Host: h, Recorder: kube.NewRecorder(env.Client, "npu-rebooter"), Log: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- agent.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("rebooter: %v", err)
		}
	})
	return names[0], h
}

// With the systemd method refused and no fallback, the rebooter stops
// after --reboot-attempts, and says so: the node, the host problem's fix,
// how to try again.
func TestRebootAttemptsThenStop(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 2*time.Minute)
	name, h := runAgent(t, ctx, 1, "")
	requestReboot(t, name, contract.ReasonUpgrade)
	ev := waitEvent(ctx, t, name, contract.EventRebootFailed, "stops trying")
	for _, w := range []string{name, "--reboot-attempts=1", "rebooter.appArmorProfile", "delete the npu-rebooter pod on node " + name} {
		if !strings.Contains(ev.Message, w) {
			t.Errorf("give-up event %q lacks %q", ev.Message, w)
		}
	}
	if got := h.methods(); len(got) != 1 || got[0] != host.RebootSystemd {
		t.Errorf("reboot methods tried: %v; want systemd once", got)
	}
}

// With --fallback-method=sysrq the refused systemd reboot is followed at
// once by a sysrq reboot.
func TestRebootFallsBackToSysrq(t *testing.T) {
	t.Parallel()
	ctx := ctxTimeout(t, 2*time.Minute)
	name, h := runAgent(t, ctx, 1, host.RebootSysrq)
	requestReboot(t, name, contract.ReasonUpgrade)
	waitEvent(ctx, t, name, contract.EventRebootFailed, "trying --fallback-method=sysrq now")
	waitEvent(ctx, t, name, contract.EventRebooting, "method sysrq")
	st, err := h.State()
	if err != nil {
		t.Fatal(err)
	}
	if st.RebootRequest != host.RebootSysrq {
		t.Errorf("host's pending reboot %q; want sysrq", st.RebootRequest)
	}
	if got := h.methods(); strings.Join([]string{string(got[0]), string(got[len(got)-1])}, ",") != "systemd,sysrq" || len(got) != 2 {
		t.Errorf("reboot methods tried: %v; want systemd then sysrq", got)
	}
}
