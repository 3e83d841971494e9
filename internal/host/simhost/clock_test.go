package simhost

import (
	"testing"
	"time"

	"github.com/openfuyao/npu-stack/internal/host"
)

func TestClockOffset(t *testing.T) {
	h, err := Create(t.TempDir(), Spec{Chip: "910b", ChipCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []time.Duration{0, 10 * time.Minute, -3 * time.Hour} {
		if err := h.SetClockOffset(off); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		got := host.ClockOf(h).Now()
		after := time.Now()
		if got.Before(before.Add(off)) || got.After(after.Add(off)) {
			t.Errorf("offset %s: clock says %s, want between %s and %s", off, got, before.Add(off), after.Add(off))
		}
	}
}
