package steplat

import (
	"sort"
	"time"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// Kind is what allowed a step.
type Kind string

const (
	// Immediate: a step that needs nothing from the cluster (cordon,
	// no jobs to wait for, no NPU pods, drain off, uncordon): allowed as
	// soon as the previous step was written.
	Immediate Kind = "previous step done"
	// Rebooted: the node reports a new boot ID → validation-required.
	Rebooted Kind = "boot ID changed"
	// DriverReady: driver-ready=true with the new version → re-roll.
	DriverReady Kind = "driver ready"
	// PodsReady: the re-rolled pods are Ready → uncordon-required.
	PodsReady Kind = "re-rolled pods Ready"
	// Admitted: a node left the parallelism budget → a queued node starts.
	Admitted Kind = "budget freed"
)

// Kinds in report order.
var Kinds = []Kind{Immediate, Rebooted, DriverReady, PodsReady, Admitted}

// Latencies are the measured step latencies by kind.
type Latencies map[Kind][]time.Duration

// All returns every latency, sorted.
func (l Latencies) All() []time.Duration {
	var out []time.Duration
	for _, d := range l {
		out = append(out, d...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Percentile is the nearest-rank q-quantile (0 < q ≤ 1) of sorted ds.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

var immediate = map[string]bool{
	string(contract.StateCordonRequired): true, string(contract.StateWaitForJobsRequired): true,
	string(contract.StatePodDeletionRequired): true, string(contract.StateDrainRequired): true,
	string(contract.StateUncordonRequired): true,
}

// Analyze computes the latencies of one rollout to version desired with
// the given effective parallelism (the first parallelism admissions were
// allowed by the start of the rollout, not by a freed slot).
func Analyze(t Timelines, desired string, parallelism int) Latencies {
	out := Latencies{}
	podsByNode := map[string][]*PodSample{}
	for _, p := range t.Pods {
		podsByNode[p.Node] = append(podsByNode[p.Node], p)
	}
	var admissions, frees []time.Time
	for name, samples := range t.Nodes {
		adm, fr := analyzeNode(samples, podsByNode[name], desired, out)
		admissions = append(admissions, adm...)
		frees = append(frees, fr...)
	}
	sortTimes(admissions)
	sortTimes(frees)
	if parallelism > 0 && len(admissions) > parallelism {
		for i, a := range admissions[parallelism:] {
			if i < len(frees) && !a.Before(frees[i]) {
				out[Admitted] = append(out[Admitted], a.Sub(frees[i]))
			}
		}
	}
	return out
}

// analyzeNode adds the node's own step latencies to out and returns its
// admission and slot-freeing times.
func analyzeNode(ss []NodeSample, pods []*PodSample, desired string, out Latencies) (admissions, frees []time.Time) {
	enter := time.Time{} // when the current state was first seen
	var rebootBoot string
	var rerollAt time.Time
	for i, s := range ss {
		if i == 0 {
			enter = s.At
			continue
		}
		prev := ss[i-1]
		if s.State != prev.State {
			from, to := prev.State, s.State
			switch {
			case from == string(contract.StateUpgradeRequired) && to == string(contract.StateCordonRequired):
				admissions = append(admissions, s.At)
			case immediate[from]:
				out[Immediate] = append(out[Immediate], s.At.Sub(enter))
			case from == string(contract.StateRebootRequired) && to == string(contract.StateValidationRequired):
				if at, ok := firstAfter(ss[:i], enter, func(x NodeSample) bool { return x.BootID != rebootBoot }); ok {
					out[Rebooted] = append(out[Rebooted], s.At.Sub(at))
				}
			case from == string(contract.StateValidationRequired) && to == string(contract.StateUncordonRequired):
				if at, ok := lastReady(pods, rerollAt); ok && !at.After(s.At) {
					out[PodsReady] = append(out[PodsReady], s.At.Sub(at))
				}
			}
			if to == string(contract.StateDone) || to == string(contract.StateFailed) {
				if from != string(contract.StateUpgradeRequired) && from != string(contract.StateDone) {
					frees = append(frees, s.At)
				}
			}
			if to == string(contract.StateRebootRequired) {
				rebootBoot = s.BootID
			}
			if to == string(contract.StateValidationRequired) {
				rerollAt = time.Time{}
			}
			enter = s.At
		}
		if s.State == string(contract.StateValidationRequired) && s.Rerolled && !prev.Rerolled && rerollAt.IsZero() {
			rerollAt = s.At
			ready := func(x NodeSample) bool { return x.DriverReady && x.DriverVersion == desired }
			if at, ok := firstAfter(ss[:i], enter, ready); ok {
				out[DriverReady] = append(out[DriverReady], s.At.Sub(at))
			}
		}
	}
	return admissions, frees
}

// firstAfter is when cond first held in ss at or after since (the sample
// at since is the whole node as the state was entered).
func firstAfter(ss []NodeSample, since time.Time, cond func(NodeSample) bool) (time.Time, bool) {
	for _, s := range ss {
		if !s.At.Before(since) && cond(s) {
			return s.At, true
		}
	}
	return time.Time{}, false
}

// lastReady is when the last pod first seen after the re-roll became Ready.
func lastReady(pods []*PodSample, rerollAt time.Time) (time.Time, bool) {
	var last time.Time
	for _, p := range pods {
		if rerollAt.IsZero() || p.FirstSeen.Before(rerollAt) || p.ReadyAt.IsZero() {
			continue
		}
		if p.ReadyAt.After(last) {
			last = p.ReadyAt
		}
	}
	return last, !last.IsZero()
}

func sortTimes(ts []time.Time) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
}
