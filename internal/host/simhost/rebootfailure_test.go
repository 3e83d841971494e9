package simhost

import (
	"context"
	"testing"

	"github.com/openfuyao/npu-stack/internal/host"
)

func TestRebootFailureRefusesTheReboot(t *testing.T) {
	h, err := Create(t.TempDir(), Spec{Chip: "910b", ChipCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Update(func(st *State) error { st.RebootFailure = "systemd busy"; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := h.Reboot(context.Background(), host.RebootSystemd); err == nil {
		t.Fatal("Reboot succeeded on a host set to fail it")
	}
	if st, _ := h.State(); st.RebootRequest != "" {
		t.Fatalf("a failed reboot left request %q", st.RebootRequest)
	}
	if err := h.Update(func(st *State) error { st.RebootFailure = ""; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := h.Reboot(context.Background(), host.RebootSystemd); err != nil {
		t.Fatal(err)
	}
}
