package watchcost

import (
	"math"
	"strings"
	"testing"
)

// A size whose baseline sends 9 node events per status report and 60
// lease events a minute; agents that receive their own node's reports
// (one event per report) and, with the old watch, every node's.
func size(nodes int, perAgentPerChange float64) Size {
	changes := int64(nodes) // one report per node in the window
	base := Window{Variant: "none", Seconds: 60, NodeChanges: changes, NodeEvents: 9 * float64(changes), LeaseEvents: 60}
	with := Window{Variant: string(Requests), Agents: nodes, Seconds: 120, NodeChanges: 2 * changes,
		NodeEvents: (9 + perAgentPerChange) * float64(2*changes), LeaseEvents: 120, StormEvents: 0}
	return Size{Nodes: nodes, Windows: []Window{base, with}}
}

func TestAgentEventsPerMinuteLeavesOutTheOtherWatchers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		s         Size
		perMinute float64
	}{
		// Own node only: 2 reports per node over 2 minutes, 1 a minute.
		{"own node", size(1000, 1), 1},
		// Every node: each report reaches all N agents.
		{"all nodes", size(100, 100), 100},
		{"nothing", size(100, 0), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.s.AgentEventsPerMinute(tc.s.Windows[1])
			if math.Abs(got-tc.perMinute) > 1e-9 {
				t.Fatalf("events per agent per minute = %v, want %v", got, tc.perMinute)
			}
			if b := tc.s.AgentEventsPerMinute(tc.s.Windows[0]); b != 0 {
				t.Fatalf("the baseline has no agents, got %v events per agent", b)
			}
		})
	}
}

func TestTargetsCompareTheSmallestAndLargestFleet(t *testing.T) {
	flat := Report{Sizes: []Size{size(1000, 1), size(10000, 1)}}
	growing := Report{Sizes: []Size{size(1000, 1), size(10000, 10)}}
	for _, tc := range []struct {
		name string
		r    Report
		met  bool
	}{{"flat", flat, true}, {"growing", growing, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ts := Targets(tc.r)
			if len(ts) != 2 {
				t.Fatalf("targets: %+v, want two", ts)
			}
			if ts[0].Met != tc.met || !strings.Contains(ts[0].Name, "N = 10000 vs 1000") {
				t.Fatalf("events target %+v, want met=%t for 10000 vs 1000", ts[0], tc.met)
			}
		})
	}
	if ts := Targets(Report{Sizes: []Size{size(1000, 1)}}); ts != nil {
		t.Fatalf("one size has nothing to compare, got %+v", ts)
	}
}

func TestParseServerSumsTheSeriesOfNodesAndLeases(t *testing.T) {
	text := `# TYPE apiserver_watch_events_total counter
apiserver_watch_events_total{group="",resource="nodes",version="v1"} 120
apiserver_watch_events_total{group="",resource="pods",version="v1"} 7
apiserver_watch_events_total{group="coordination.k8s.io",resource="leases",version="v1"} 30
# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",group="",resource="nodes",scope="cluster",subresource="",verb="WATCH",version="v1"} 4
apiserver_longrunning_requests{component="apiserver",group="",resource="nodes",scope="resource",subresource="",verb="WATCH",version="v1"} 2
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 9
apiserver_longrunning_requests{component="apiserver",group="coordination.k8s.io",resource="leases",scope="namespace",subresource="",verb="WATCH",version="v1"} 3
`
	s, err := parseServer(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := serverSample{NodeEvents: 120, LeaseEvents: 30, NodeWatches: 6, LeaseWatches: 3}
	if s != want {
		t.Fatalf("parsed %+v, want %+v", s, want)
	}
	if _, err := parseServer(strings.NewReader("# TYPE apiserver_longrunning_requests gauge\napiserver_longrunning_requests 1\n")); err == nil || !strings.Contains(err.Error(), watchEventsFamily) {
		t.Fatalf("metrics without %s: err = %v, want one naming it", watchEventsFamily, err)
	}
}
