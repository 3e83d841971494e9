package rollout

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
)

func ev(reason contract.EventReason, msg string, ago time.Duration) corev1.Event {
	return corev1.Event{Reason: string(reason), Message: msg, LastTimestamp: metav1.NewTime(now.Add(-ago))}
}

// TestBlockerNamesTheNewestCause: each blocker the other actors report
// becomes the note; older events and unrelated reasons do not.
func TestBlockerNamesTheNewestCause(t *testing.T) {
	since := now.Add(-10 * time.Minute)
	for name, tc := range map[string]struct {
		events []corev1.Event
		want   string
	}{
		"loop guard": {[]corev1.Event{ev(contract.EventRebootRefused, "refusing to reboot node a: loop guard; reset: kubectl annotate node a npu.openfuyao.com/driver-upgrade.reboot-history-", time.Minute)},
			"RebootRefused: refusing to reboot node a: loop guard; reset: kubectl annotate node a npu.openfuyao.com/driver-upgrade.reboot-history-"},
		"uptime guard":         {[]corev1.Event{ev(contract.EventRebootPending, "reboot (reason=upgrade) waits for the uptime guard: up 3m0s", time.Minute)}, "RebootPending: reboot (reason=upgrade) waits for the uptime guard"},
		"slot holder":          {[]corev1.Event{ev(contract.EventRebootPending, "waits for a reboot slot: all 1 are held (by b)", time.Minute)}, "held (by b)"},
		"storm":                {[]corev1.Event{ev(contract.EventRecoveryPaused, "automatic recovery paused: 3 of 4 NPU nodes", time.Minute)}, "RecoveryPaused: automatic recovery paused"},
		"pdb":                  {[]corev1.Event{ev(contract.EventEvictionBlocked, "pod ml/train-0: PodDisruptionBudget ml/train refuses", time.Minute)}, "EvictionBlocked: pod ml/train-0: PodDisruptionBudget ml/train"},
		"invalid approval":     {[]corev1.Event{ev(contract.EventApprovalInvalid, `approve-reboot="yes" is not an approval`, time.Minute)}, `ApprovalInvalid: approve-reboot="yes"`},
		"newest wins":          {[]corev1.Event{ev(contract.EventRebootPending, "waits for approval", 5*time.Minute), ev(contract.EventRebootRefused, "loop guard", time.Minute)}, "RebootRefused: loop guard"},
		"older than the state": {[]corev1.Event{ev(contract.EventRebootRefused, "loop guard", time.Hour)}, ""},
		"unrelated reasons":    {[]corev1.Event{ev(contract.EventRebootCompleted, "done", time.Minute), ev(contract.EventNPUDriverUpgrade, "x", time.Minute)}, ""},
		"no events":            {nil, ""},
		"recovery window":      {[]corev1.Event{ev(contract.EventMaintenanceWindowClosed, "node a: its recovery reboot (reason=recovery) waits for the maintenance window", time.Minute)}, "MaintenanceWindowClosed: node a: its recovery reboot"},
		"the rollout's own window event": {[]corev1.Event{func() corev1.Event {
			e := ev(contract.EventMaintenanceWindowClosed, "node a: its driver upgrade waits", time.Minute)
			e.Source.Component = EventSource
			return e
		}()}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			got := Blocker(tc.events, since)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("Blocker = %q, want %q", got, tc.want)
			}
		})
	}
	st := WithBlockers(Status{Nodes: []StatusRow{{Node: "a", Note: "waiting for the rebooter"}, {Node: "b"}, {Node: "c", Note: "rebooting"}}},
		map[string]string{"a": "RebootRefused: loop guard", "b": "RebootPending: waits for approval"})
	if st.Nodes[0].Note != "waiting for the rebooter; RebootRefused: loop guard" || st.Nodes[1].Note != "RebootPending: waits for approval" || st.Nodes[2].Note != "rebooting" {
		t.Fatalf("notes: %+v", st.Nodes)
	}
}
