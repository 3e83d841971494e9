package steplat

import (
	"time"

	"github.com/openfuyao/npu-stack/tests/bench/inflight"
)

// Cycle is where one node's upgrade time went, from the write admitting
// it to the write taking it out of progress (both as seen by the
// benchmark's watch).
type Cycle struct {
	Total time.Duration
	// Rollout is the sum of the node's own step latencies within the
	// cycle: the rollout's share. The rest of Total is the node's side
	// (the simulated per-node time, and the simulated agents' and the
	// API server's latencies).
	Rollout time.Duration
}

// Cycles are the cycles of the nodes the rollout to desired admitted and
// took out of progress, in no particular order.
func Cycles(t Timelines, desired string) []Cycle {
	podsByNode := map[string][]*PodSample{}
	for _, p := range t.Pods {
		podsByNode[p.Node] = append(podsByNode[p.Node], p)
	}
	var out []Cycle
	for name, samples := range t.Nodes {
		own := Latencies{}
		admissions, frees := analyzeNode(samples, podsByNode[name], desired, own)
		if len(admissions) == 0 {
			continue
		}
		for _, f := range frees {
			if f.After(admissions[0]) {
				var sum time.Duration
				for _, ds := range own {
					for _, d := range ds {
						sum += d
					}
				}
				out = append(out, Cycle{Total: f.Sub(admissions[0]), Rollout: sum})
				break
			}
		}
	}
	return out
}

// MeanCycle is the mean of each part of cs (zero for none).
func MeanCycle(cs []Cycle) Cycle {
	if len(cs) == 0 {
		return Cycle{}
	}
	var m Cycle
	for _, c := range cs {
		m.Total += c.Total
		m.Rollout += c.Rollout
	}
	n := time.Duration(len(cs))
	return Cycle{Total: m.Total / n, Rollout: m.Rollout / n}
}

// InProgress are the nodes' times in progress (the states the rollout's
// maxParallelUpgrades counts), from the samples of each node in the order
// seen; a node still in progress is closed at end.
func InProgress(t Timelines, end time.Time) []inflight.Interval {
	var tr inflight.Tracker
	for name, ss := range t.Nodes {
		for _, s := range ss {
			tr.Observe(name, s.At, inProgress(s.State))
		}
	}
	return tr.Intervals(end)
}
