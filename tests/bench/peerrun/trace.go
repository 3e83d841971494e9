package peerrun

import (
	"time"
)

// Record is one reconcile of the peer, as npu-peer writes it to stdout.
type Record struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Trigger is "event" (a watched change came since the previous
	// reconcile began), "requeue" (none: GPU Operator's planned requeue)
	// or "retry" (none, after a failed reconcile).
	Trigger string         `json:"trigger"`
	States  map[string]int `json:"states"`
	Error   string         `json:"error,omitempty"`
}

// Library states the runner reads.
const (
	StateDone   = "upgrade-done"
	StateFailed = "upgrade-failed"
	// StateLabel is the library's node label with GPU Operator's driver
	// name.
	StateLabel = "nvidia.com/gpu-driver-upgrade-state"
)

// Split is where the peer's time went between two instants: reconciling
// (building and applying the state, and the library's synchronous API
// calls in it), idle until its planned requeue woke it, and the rest
// (idle until a watched change woke it: the cluster acting, the
// library's own asynchronous steps, or an event's latency).
type Split struct {
	Reconciles int            `json:"reconciles"`
	ByTrigger  map[string]int `json:"reconcilesByTrigger"`
	Failed     int            `json:"failedReconciles,omitempty"`
	Acting     time.Duration  `json:"acting"`
	// WaitRequeue is the idle time before reconciles the requeue
	// started: what a change the controller does not watch (a driver pod
	// restarted and Ready) waits before the library looks again.
	WaitRequeue time.Duration `json:"waitingForRequeue"`
	Other       time.Duration `json:"other"`
	// StartUp is from the start of the window to the start of the first
	// reconcile in it: the process's start, leader election and caches
	// when the window opens with the process's start.
	StartUp time.Duration `json:"startUp"`
}

// SplitTime attributes [from, to] among the reconciles of recs (in the
// order written, which is the order they ran: one at a time).
func SplitTime(recs []Record, from, to time.Time) Split {
	s := Split{ByTrigger: map[string]int{}}
	prevEnd := from
	for _, r := range recs {
		if !r.End.After(from) || r.Start.After(to) {
			if !r.End.After(from) {
				prevEnd = maxTime(prevEnd, r.End)
			}
			continue
		}
		if s.Reconciles == 0 && r.Start.After(from) {
			s.StartUp = r.Start.Sub(from)
		}
		s.Reconciles++
		s.ByTrigger[r.Trigger]++
		if r.Error != "" {
			s.Failed++
		}
		s.Acting += minTime(r.End, to).Sub(maxTime(r.Start, from))
		if r.Trigger == "requeue" && r.Start.After(prevEnd) {
			s.WaitRequeue += minTime(r.Start, to).Sub(prevEnd)
		}
		prevEnd = maxTime(prevEnd, r.End)
	}
	s.Other = max(to.Sub(from)-s.Acting-s.WaitRequeue, 0)
	return s
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
