package steplat

import (
	"sort"
	"time"

	"github.com/openfuyao/npu-stack/internal/contract"
)

// Kind is what allowed a step.
type Kind string

const (
	// Admitted: a node left the parallelism budget → a queued node is
	// admitted (leaves upgrade-required, or no state, for any state in
	// progress, however far its write goes).
	Admitted Kind = "budget freed"
	// Immediate: a step that needs nothing from the cluster (cordon, no
	// jobs to wait for, no NPU pods, drain off, uncordon), allowed as soon
	// as the previous step was written. Counted only where the node was
	// seen in such a state, i.e. where the rollout wrote the previous step
	// on its own; a state the rollout passes through inside one write has
	// no latency of its own.
	Immediate Kind = "previous step done"
	// Rebooted: the node reports a new boot ID → the node leaves
	// reboot-required (for validation-required, or further in the same
	// write).
	Rebooted Kind = "boot ID changed"
	// Validated: the node's driver-ready=true with the new version and its
	// pods Ready again after the reboot (restarted in place, or re-created
	// by a re-roll), whichever came last → the node leaves
	// validation-required for uncordon-required or done (also when the
	// same write left reboot-required).
	Validated Kind = "driver-ready and pods Ready again"
	// Rerolled: driver-ready=true with the new version → the rollout
	// deletes the node's pods that started before the driver was ready
	// (none when the kubelet restarted them in place after the driver).
	Rerolled Kind = "driver ready → re-roll"
)

// Kinds in report order (the order of the steps in a node's upgrade).
var Kinds = []Kind{Admitted, Immediate, Rebooted, Validated, Rerolled}

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

// afterReboot are the states a node may go to when it leaves
// reboot-required on its new boot; afterValidation those when it leaves
// validation-required.
var (
	afterReboot = map[string]bool{
		string(contract.StateValidationRequired): true, string(contract.StateUncordonRequired): true, string(contract.StateDone): true,
	}
	afterValidation = map[string]bool{string(contract.StateUncordonRequired): true, string(contract.StateDone): true}
)

func inProgress(state string) bool { return contract.UpgradeState(state).InProgress() }

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
// admission and slot-freeing times. Each state change seen is one write
// of the rollout, which may have taken several steps at once.
func analyzeNode(ss []NodeSample, pods []*PodSample, desired string, out Latencies) (admissions, frees []time.Time) {
	enter := time.Time{} // when the current state was first seen
	var rebootBoot string
	var bootAt time.Time // when the new boot was first seen (zero: not yet)
	var rerollAt time.Time
	for i, s := range ss {
		if i == 0 {
			enter = s.At
			if s.State == string(contract.StateRebootRequired) {
				rebootBoot = s.BootID
			}
			continue
		}
		prev := ss[i-1]
		if s.State != prev.State {
			from, to := prev.State, s.State
			if (from == string(contract.StateDone) || from == string(contract.StateUpgradeRequired)) && inProgress(to) {
				admissions = append(admissions, s.At)
			}
			if immediate[from] {
				out[Immediate] = append(out[Immediate], s.At.Sub(enter))
			}
			if from == string(contract.StateRebootRequired) && afterReboot[to] && !bootAt.IsZero() {
				out[Rebooted] = append(out[Rebooted], s.At.Sub(bootAt))
			}
			passedValidation := from == string(contract.StateValidationRequired) ||
				(from == string(contract.StateRebootRequired) && to != string(contract.StateValidationRequired))
			if passedValidation && afterValidation[to] && !bootAt.IsZero() {
				if at, ok := validatedAt(ss[:i], pods, bootAt, s.At, desired); ok {
					out[Validated] = append(out[Validated], s.At.Sub(at))
				}
			}
			if inProgress(from) && !inProgress(to) {
				frees = append(frees, s.At)
			}
			if to == string(contract.StateRebootRequired) {
				rebootBoot, bootAt = s.BootID, time.Time{}
			}
			if to == string(contract.StateValidationRequired) {
				rerollAt = time.Time{}
			}
			enter = s.At
		}
		if s.State == string(contract.StateRebootRequired) && bootAt.IsZero() && s.BootID != rebootBoot {
			bootAt = s.At
		}
		if s.State == string(contract.StateValidationRequired) && s.Rerolled && !prev.Rerolled && rerollAt.IsZero() {
			rerollAt = s.At
			if at, ok := firstAfter(ss[:i], bootAt, driverReady(desired)); ok && !bootAt.IsZero() {
				out[Rerolled] = append(out[Rerolled], s.At.Sub(at))
			}
		}
	}
	return admissions, frees
}

func driverReady(desired string) func(NodeSample) bool {
	return func(x NodeSample) bool { return x.DriverReady && x.DriverVersion == desired }
}

// validatedAt is when the node's validation became possible after the
// boot seen at boot, as of the write seen at step: driver-ready=true with
// the desired version, and every pod of the node present at step Ready
// again, whichever came last. A pod Ready since before driver-ready (one
// never restarted, Ready since before the boot) is no cause.
func validatedAt(ss []NodeSample, pods []*PodSample, boot, step time.Time, desired string) (time.Time, bool) {
	at, ok := firstAfter(ss, boot, driverReady(desired))
	if !ok {
		return time.Time{}, false
	}
	for _, p := range pods {
		if r, ready := p.ReadyBy(step); ready && r.After(at) {
			at = r
		}
	}
	return at, true
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

func sortTimes(ts []time.Time) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
}
