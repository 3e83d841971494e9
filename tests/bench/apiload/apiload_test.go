package apiload

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/openfuyao/npu-stack/tests/bench/report"
)

// exposition renders the duration histogram the way the API server does:
// each (verb, resource, subresource) split further by scope and component,
// cumulative buckets. counts[i] is the cumulative count at bounds[i].
func exposition(series map[[5]string][]int, sums map[[5]string]float64) string {
	bounds := []string{"0.1", "0.2", "0.4", "1", "60", "+Inf"}
	var b strings.Builder
	b.WriteString("# HELP apiserver_request_duration_seconds x\n# TYPE apiserver_request_duration_seconds histogram\n")
	for k, counts := range series {
		labels := fmt.Sprintf(`component=%q,resource=%q,scope=%q,subresource=%q,verb=%q`, k[3], k[1], k[4], k[2], k[0])
		for i, le := range bounds {
			fmt.Fprintf(&b, "apiserver_request_duration_seconds_bucket{%s,le=%q} %d\n", labels, le, counts[i])
		}
		fmt.Fprintf(&b, "apiserver_request_duration_seconds_sum{%s} %g\n", labels, sums[k])
		fmt.Fprintf(&b, "apiserver_request_duration_seconds_count{%s} %d\n", labels, counts[len(counts)-1])
	}
	b.WriteString("# TYPE apiserver_request_total counter\napiserver_request_total{verb=\"PATCH\"} 3\n")
	return b.String()
}

func TestBetweenSumsSeriesAndTakesTheDifference(t *testing.T) {
	patchNode := [5]string{"PATCH", "nodes", "", "apiserver", "cluster"}
	patchNodeDry := [5]string{"PATCH", "nodes", "", "kubectl", "cluster"}
	podStatus := [5]string{"PATCH", "pods", "status", "apiserver", "namespace"}
	getNode := [5]string{"GET", "nodes", "", "apiserver", "resource"}
	t0 := time.Date(2026, 11, 22, 19, 0, 0, 0, time.UTC)

	before, err := Parse(strings.NewReader(exposition(map[[5]string][]int{
		patchNode: {10, 10, 10, 10, 10, 10}, patchNodeDry: {0, 0, 0, 0, 0, 0},
		podStatus: {5, 5, 5, 5, 5, 5}, getNode: {100, 100, 100, 100, 100, 100},
	}, map[[5]string]float64{patchNode: 0.5, podStatus: 0.25, getNode: 1})), t0)
	if err != nil {
		t.Fatal(err)
	}
	// 10 s later: 100 more node patches (90 under 0.1 s, 9 more under
	// 0.4 s, 1 at 0.6 s: p50 ≤ 0.1, p99 ≤ 0.4), split over two series;
	// 20 pod status patches, all between 0.2 and 0.4 s; reads do not
	// count as writes.
	after, err := Parse(strings.NewReader(exposition(map[[5]string][]int{
		patchNode: {60, 60, 65, 66, 66, 66}, patchNodeDry: {40, 40, 44, 44, 44, 44},
		podStatus: {5, 5, 25, 25, 25, 25}, getNode: {1100, 1100, 1100, 1100, 1100, 1100},
	}, map[[5]string]float64{patchNode: 5.5, patchNodeDry: 2, podStatus: 6.25, getNode: 9})), t0.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := Between(before, after)
	want := report.APILoad{Seconds: 10, WritesPerSecond: 12, Busiest: []report.OpLoad{
		{Op: "PATCH nodes", PerSecond: 10, Mean: 0.07, P50: 0.1, P99: 0.4},
		{Op: "PATCH pods/status", PerSecond: 2, Mean: 0.3, P50: 0.4, P99: 0.4},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Between:\n got %+v\nwant %+v", got, want)
	}
}

func TestQuantileBeyondTheLastBucketIsTheLastBound(t *testing.T) {
	h := Histogram{Count: 10, Buckets: []Bucket{{0.1, 1}, {60, 2}, {math.Inf(1), 10}}}
	if got := h.quantile(0.99); got != 60 {
		t.Fatalf("p99 of requests mostly over 60 s: %v, want 60", got)
	}
}

func TestParseNeedsTheDurationHistogram(t *testing.T) {
	for name, text := range map[string]string{
		"absent":     "# TYPE apiserver_request_total counter\napiserver_request_total{verb=\"GET\"} 1\n",
		"not a hist": "# TYPE apiserver_request_duration_seconds gauge\napiserver_request_duration_seconds 1\n",
		"garbage":    "apiserver_request_duration_seconds_bucket{le=\"0.1\" 3\n",
	} {
		if _, err := Parse(strings.NewReader(text), time.Now()); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
}

// The execution time of API Priority and Fairness is summed by
// FlowSchema over priority levels and request types; a schema's share is
// of the time every schema took between two snapshots.
func TestExecShareIsOfEverySchemasExecutionTime(t *testing.T) {
	writes := exposition(map[[5]string][]int{{"PATCH", "nodes", "", "apiserver", "cluster"}: {1, 1, 1, 1, 1, 1}}, nil)
	exec := func(side, admin, adminWatch float64) string {
		var b strings.Builder
		b.WriteString("# TYPE apiserver_flowcontrol_request_execution_seconds histogram\n")
		for _, s := range []struct {
			pl, fs, typ string
			sum         float64
		}{{"exempt", "npu-bench-side", "regular", side}, {"exempt", "exempt", "regular", admin}, {"exempt", "exempt", "watch", adminWatch}} {
			l := fmt.Sprintf(`flow_schema=%q,priority_level=%q,type=%q`, s.fs, s.pl, s.typ)
			fmt.Fprintf(&b, "apiserver_flowcontrol_request_execution_seconds_bucket{%s,le=\"+Inf\"} 1\n", l)
			fmt.Fprintf(&b, "apiserver_flowcontrol_request_execution_seconds_sum{%s} %g\n", l, s.sum)
			fmt.Fprintf(&b, "apiserver_flowcontrol_request_execution_seconds_count{%s} 1\n", l)
		}
		return writes + b.String()
	}
	t0 := time.Now()
	a, err := Parse(strings.NewReader(exec(1, 10, 2)), t0)
	if err != nil {
		t.Fatal(err)
	}
	if a.Exec["exempt"] != 12 || a.Exec["npu-bench-side"] != 1 {
		t.Fatalf("execution time by schema %v: want exempt 12 (two types), npu-bench-side 1", a.Exec)
	}
	// Since a: the side 3 s, the admin 4 + 1 s: the side's share 3/8.
	b, err := Parse(strings.NewReader(exec(4, 14, 3)), t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := ExecShare(a, b, "npu-bench-side"); !ok || got != 3.0/8 {
		t.Fatalf("share %v, %t; want 0.375", got, ok)
	}
	if got, ok := ExecShare(a, b, "absent"); !ok || got != 0 {
		t.Fatalf("share of a schema that executed nothing %v, %t; want 0", got, ok)
	}
	if _, ok := ExecShare(b, b, "npu-bench-side"); ok {
		t.Fatal("a share of no execution at all")
	}
	// A server without API Priority and Fairness: no execution time, no share.
	none, err := Parse(strings.NewReader(writes), t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ExecShare(none, none, "npu-bench-side"); ok {
		t.Fatal("a share without the execution time histogram")
	}
}
