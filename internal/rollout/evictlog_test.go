package rollout

import (
	"fmt"
	"strings"
	"testing"
)

// TestBlockedWriterReportsEachRefusedPodOnce: drain's retry lines (split
// across writes as a logger may split them) give one report per pod, and
// everything still reaches the log.
func TestBlockedWriterReportsEachRefusedPodOnce(t *testing.T) {
	var log strings.Builder
	var got []string
	w := newBlockedWriter(&log, func(pod, err string) { got = append(got, pod+" | "+err) })
	line := func(pod string) string {
		return fmt.Sprintf("error when evicting pods/%q -n \"ml\" (will retry after 1s): Cannot evict pod as it would violate the pod's disruption budget.\n", pod)
	}
	all := line("train-0") + line("train-0") + "evicting pod ml/train-1\n" + line("train-1")
	for _, chunk := range []string{all[:30], all[30:101], all[101:]} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"ml/train-0 | Cannot evict pod as it would violate the pod's disruption budget.", "ml/train-1 | Cannot evict pod as it would violate the pod's disruption budget."}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("reports:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if log.String() != all {
		t.Fatalf("the log lost lines:\n%s", log.String())
	}
}
