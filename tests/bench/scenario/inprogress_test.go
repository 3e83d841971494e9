package scenario

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openfuyao/npu-stack/tests/bench/inflight"
	"github.com/openfuyao/npu-stack/tests/bench/report"
)

// The report keeps the most nodes at once, when from the clock's start,
// the time over p and the mean cycle; the curve goes to its file.
func TestConcurrencyFromTheClocksStart(t *testing.T) {
	start := time.Date(2026, 11, 26, 1, 52, 18, 0, time.UTC)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	ivs := []inflight.Interval{
		{Node: "a", Start: at(2), End: at(364)},
		{Node: "b", Start: at(2), End: at(364)},
		{Node: "c", Start: at(364), End: at(726)},
		{Node: "d", Start: at(365), End: at(727)},
		{Node: "e", Start: at(366), End: at(728)},
	}
	path := filepath.Join(t.TempDir(), "peer.inprogress.tsv")
	got, err := concurrency(ivs, 2, start, path)
	if err != nil {
		t.Fatal(err)
	}
	want := report.Concurrency{Max: 3, MaxAt: 366, OverParallelism: 360, Nodes: 5, MeanCycle: 362}
	if *got != want {
		t.Errorf("concurrency %+v, want %+v", *got, want)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if w := "seconds\tin_progress\n2.000\t2\n364.000\t1\n365.000\t2\n366.000\t3\n726.000\t2\n727.000\t1\n728.000\t0\n"; string(b) != w {
		t.Errorf("curve file %q, want %q", b, w)
	}
	if _, err := concurrency(ivs, 2, start, filepath.Join(t.TempDir(), "missing", "x.tsv")); err == nil {
		t.Error("no error for a curve file that cannot be written")
	}
}
