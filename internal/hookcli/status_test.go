package hookcli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/internal/rollout"
)

// status shows what each driver pod's install waits for, and for a
// blocked or failed one the command that makes it try again now.
func TestPrintStatusShowsTheInstallAndItsRetry(t *testing.T) {
	st := rollout.Status{Nodes: []rollout.StatusRow{
		{Node: "npu-0", State: "reboot-required", Install: "blocked: node npu-0: ... PID 77 (sleep 600) holds /dev/davinci0; next try at 2026-11-28T05:00:00Z"},
		{Node: "npu-1", State: "reboot-required", Install: "installed 25.5.0 at 2026-11-28T04:59:00Z; health probes paused"},
		{Node: "npu-2", State: "up-to-date"},
	}}
	var out bytes.Buffer
	if err := PrintStatus(&out, st, outputTable, "npu-operator"); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, w := range []string{
		"driver install on npu-0: blocked: node npu-0: ... PID 77 (sleep 600) holds /dev/davinci0; next try at 2026-11-28T05:00:00Z\n  try again now: kubectl delete pod -n npu-operator -l app=npu-driver-daemonset --field-selector spec.nodeName=npu-0\n",
		"driver install on npu-1: installed 25.5.0",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("status lacks %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "spec.nodeName=npu-1") || strings.Contains(got, "install on npu-2") {
		t.Errorf("retry offered where nothing waits:\n%s", got)
	}
}

// status names a node whose runtime offers no NRI, from the injector's
// injection-status annotation, and no other node.
func TestPrintStatusShowsInjectionUnavailable(t *testing.T) {
	st := rollout.Status{Nodes: []rollout.StatusRow{
		{Node: "npu-0", State: "up-to-date", Injection: "unavailable: node npu-0: NRI socket /run/nri/nri.sock: no such file or directory; ..."},
		{Node: "npu-1", State: "up-to-date"},
	}}
	var out bytes.Buffer
	if err := PrintStatus(&out, st, outputTable, "npu-operator"); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.Contains(got, "workload injection on npu-0: unavailable: node npu-0: NRI socket /run/nri/nri.sock") || strings.Contains(got, "injection on npu-1") {
		t.Errorf("status:\n%s", got)
	}
}
