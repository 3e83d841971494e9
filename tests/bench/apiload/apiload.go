// Package apiload reads, from the API server's own metrics, what the whole
// cluster asked of it during a scenario (every client: the rollout, the
// simulated nodes, KWOK, the controller manager) and how long the server
// took to answer. The rollout's step latencies are API round trips under
// that load, so the report shows them side by side.
package apiload

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"

	"github.com/openfuyao/npu-stack/tests/bench/report"
)

// Op is one kind of request, as the API server labels it.
type Op struct{ Verb, Resource, Subresource string }

func (o Op) String() string {
	r := o.Resource
	if o.Subresource != "" {
		r += "/" + o.Subresource
	}
	return o.Verb + " " + r
}

// write is true for the verbs that change stored objects.
func (o Op) write() bool {
	switch o.Verb {
	case "GET", "LIST", "WATCH", "CONNECT":
		return false
	}
	return true
}

// Histogram is one Op's cumulative request count and latency.
type Histogram struct {
	Count, Sum float64
	// Buckets are cumulative counts by ascending upper bound (seconds).
	Buckets []Bucket
}

// Bucket is one histogram bucket.
type Bucket struct{ UpperBound, Count float64 }

// Snapshot is the API server's request latency histograms at one moment.
type Snapshot struct {
	At  time.Time
	Ops map[Op]Histogram
	// Exec is the time the API server spent executing requests so far,
	// by the FlowSchema that classified them (absent: the server runs
	// without API Priority and Fairness).
	Exec map[string]float64
}

const (
	durationFamily = "apiserver_request_duration_seconds"
	// execFamily is API Priority and Fairness's execution time, labelled
	// with the FlowSchema of each request (for a WATCH its initial stage
	// only): k8s.io/apiserver pkg/util/flowcontrol/metrics.
	execFamily = "apiserver_flowcontrol_request_execution_seconds"
)

// Take reads the API server's /metrics.
func Take(ctx context.Context, c rest.Interface, now func() time.Time) (Snapshot, error) {
	at := now()
	body, err := c.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("read the API server's /metrics: %w", err)
	}
	return Parse(bytes.NewReader(body), at)
}

// Parse reads the request latency histograms from a Prometheus text
// exposition. Series that differ only in labels other than verb, resource
// and subresource (scope, component, dry run) are summed.
func Parse(r io.Reader, at time.Time) (Snapshot, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Snapshot{}, fmt.Errorf("parse API server metrics: %w", err)
	}
	fam, ok := fams[durationFamily]
	if !ok || fam.GetType() != dto.MetricType_HISTOGRAM {
		return Snapshot{}, fmt.Errorf("API server metrics have no %s histogram", durationFamily)
	}
	s := Snapshot{At: at, Ops: map[Op]Histogram{}, Exec: execByFlow(fams[execFamily])}
	for _, m := range fam.GetMetric() {
		var op Op
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "verb":
				op.Verb = l.GetValue()
			case "resource":
				op.Resource = l.GetValue()
			case "subresource":
				op.Subresource = l.GetValue()
			}
		}
		h := s.Ops[op]
		hm := m.GetHistogram()
		h.Count += float64(hm.GetSampleCount())
		h.Sum += hm.GetSampleSum()
		h.Buckets = addBuckets(h.Buckets, hm.GetBucket())
		s.Ops[op] = h
	}
	return s, nil
}

// execByFlow sums the execution time histogram's series by FlowSchema
// (over priority levels and request types).
func execByFlow(fam *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	if fam == nil || fam.GetType() != dto.MetricType_HISTOGRAM {
		return out
	}
	for _, m := range fam.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "flow_schema" {
				out[l.GetValue()] += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// ExecShare is the share of the API server's request execution time
// from a to b that went to requests FlowSchema schema classified; false
// when the server executed nothing measured in between.
func ExecShare(a, b Snapshot, schema string) (float64, bool) {
	var all float64
	for fs, t := range b.Exec {
		all += t - a.Exec[fs]
	}
	if all <= 0 {
		return 0, false
	}
	return max(b.Exec[schema]-a.Exec[schema], 0) / all, true
}

func addBuckets(acc []Bucket, bs []*dto.Bucket) []Bucket {
	for _, b := range bs {
		ub, n := b.GetUpperBound(), float64(b.GetCumulativeCount())
		i, found := slices.BinarySearchFunc(acc, ub, func(x Bucket, t float64) int { return cmp.Compare(x.UpperBound, t) })
		if found {
			acc[i].Count += n
		} else {
			acc = slices.Insert(acc, i, Bucket{UpperBound: ub, Count: n})
		}
	}
	return acc
}

// busiest is how many write kinds the report names.
const busiest = 4

// Between is the cluster's write load from a to b: all writes a second,
// and the busiest kinds of write with their server-side latency.
func Between(a, b Snapshot) report.APILoad {
	secs := b.At.Sub(a.At).Seconds()
	out := report.APILoad{Seconds: report.Seconds(secs)}
	if secs <= 0 {
		return out
	}
	var ops []report.OpLoad
	var writes float64
	for op, hb := range b.Ops {
		if !op.write() {
			continue
		}
		d := diff(hb, a.Ops[op])
		if d.Count <= 0 {
			continue
		}
		writes += d.Count
		ops = append(ops, report.OpLoad{Op: op.String(), PerSecond: d.Count / secs, Mean: report.Seconds(d.Sum / d.Count),
			P50: report.Seconds(d.quantile(0.5)), P99: report.Seconds(d.quantile(0.99))})
	}
	slices.SortFunc(ops, func(x, y report.OpLoad) int {
		return cmp.Or(cmp.Compare(y.PerSecond, x.PerSecond), strings.Compare(x.Op, y.Op))
	})
	out.WritesPerSecond = writes / secs
	out.Busiest = ops[:min(busiest, len(ops))]
	return out
}

func diff(b, a Histogram) Histogram {
	d := Histogram{Count: b.Count - a.Count, Sum: b.Sum - a.Sum}
	for _, bb := range b.Buckets {
		n := bb.Count
		for _, ab := range a.Buckets {
			if ab.UpperBound == bb.UpperBound {
				n -= ab.Count
			}
		}
		d.Buckets = append(d.Buckets, Bucket{UpperBound: bb.UpperBound, Count: n})
	}
	return d
}

// quantile is the upper bound of the bucket holding quantile q: the API
// server's buckets are coarse (…, 0.2, 0.4, 0.6, 0.8, 1, 1.25 s, …), so
// this is "at most", never interpolated. Requests beyond the last finite
// bucket (60 s, the API server's request timeout) count in it.
func (h Histogram) quantile(q float64) float64 {
	want := q * h.Count
	last := 0.0
	for _, b := range h.Buckets {
		if math.IsInf(b.UpperBound, 1) {
			break
		}
		last = b.UpperBound
		if b.Count >= want {
			return b.UpperBound
		}
	}
	return last
}
