package watchcost

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// The API server's own metrics this measurement reads (k8s.io/apiserver
// pkg/endpoints/metrics): every event it wrote to a watch client, by
// resource, and the long-running requests open now, by verb and
// resource. Both count every client, so a figure of the agents' is the
// difference with the same window without them.
const (
	watchEventsFamily = "apiserver_watch_events_total"
	longRunningFamily = "apiserver_longrunning_requests"
)

// serverSample is what one read of the API server's /metrics gives.
type serverSample struct {
	// NodeEvents are the watch events on nodes sent so far, to every
	// watcher; LeaseEvents those on leases.
	NodeEvents, LeaseEvents float64
	// NodeWatches and LeaseWatches are the watches open now.
	NodeWatches, LeaseWatches float64
}

// readServer reads the API server's /metrics. A read that fails is tried
// again, up to scrapeAttempts times a scrapeRetry apart, as a Prometheus
// server would scrape again: while a thousand agents start at once the
// server may drop a stream (an HTTP/2 INTERNAL_ERROR) without anything
// being wrong with the counters, which are cumulative.
func readServer(ctx context.Context, c rest.Interface) (serverSample, error) {
	var err error
	for range scrapeAttempts {
		var body []byte
		if body, err = c.Get().AbsPath("/metrics").DoRaw(ctx); err == nil {
			return parseServer(bytes.NewReader(body))
		}
		select {
		case <-ctx.Done():
			return serverSample{}, ctx.Err()
		case <-time.After(scrapeRetry):
		}
	}
	return serverSample{}, fmt.Errorf("read the API server's /metrics (%d attempts): %w", scrapeAttempts, err)
}

const (
	scrapeAttempts = 5
	scrapeRetry    = 2 * time.Second
)

// parseServer reads a Prometheus text exposition of the API server.
func parseServer(r io.Reader) (serverSample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return serverSample{}, fmt.Errorf("parse the API server's metrics: %w", err)
	}
	events, ok := fams[watchEventsFamily]
	if !ok {
		return serverSample{}, fmt.Errorf("the API server's metrics have no %s", watchEventsFamily)
	}
	open, ok := fams[longRunningFamily]
	if !ok {
		return serverSample{}, fmt.Errorf("the API server's metrics have no %s", longRunningFamily)
	}
	return serverSample{
		NodeEvents:   sum(events, map[string]string{"group": "", "resource": "nodes"}),
		LeaseEvents:  sum(events, map[string]string{"group": "coordination.k8s.io", "resource": "leases"}),
		NodeWatches:  sum(open, map[string]string{"verb": "WATCH", "group": "", "resource": "nodes"}),
		LeaseWatches: sum(open, map[string]string{"verb": "WATCH", "group": "coordination.k8s.io", "resource": "leases"}),
	}, nil
}

// sum adds the values of fam's series whose labels include match.
func sum(fam *dto.MetricFamily, match map[string]string) float64 {
	var total float64
	for _, m := range fam.GetMetric() {
		found := 0
		for _, l := range m.GetLabel() {
			if v, ok := match[l.GetName()]; ok && v == l.GetValue() {
				found++
			}
		}
		if found != len(match) {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			total += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			total += m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total
}

// fleetWatchEventsFamily is the rebooter's count of what its storm
// protection's watch delivered (internal/reboot, documented in
// docs/observability.md).
const fleetWatchEventsFamily = "npu_rebooter_fleet_watch_events_total"

// fleetWatchEvents reads one agent's fleetWatchEventsFamily.
func fleetWatchEvents(g prometheus.Gatherer) (int64, error) {
	fams, err := g.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather the rebooter's metrics: %w", err)
	}
	for _, f := range fams {
		if f.GetName() == fleetWatchEventsFamily {
			return int64(sum(f, nil)), nil
		}
	}
	return 0, fmt.Errorf("the rebooter's metrics have no %s", fleetWatchEventsFamily)
}
