package watchcost

import (
	"fmt"
	"strings"

	"github.com/openfuyao/npu-stack/tests/bench/report"
)

// Seconds is a duration in seconds, as the benchmark's reports write them.
type Seconds = report.Seconds

// Report is one run of the watch-cost measurement.
type Report struct {
	Date    string          `json:"date"`
	Commit  string          `json:"commit"`
	Machine report.Machine  `json:"machine"`
	Sizes   []Size          `json:"sizes"`
	Targets []report.Target `json:"targets"`
}

// Size is one fleet size: a window without agents, then one per variant.
type Size struct {
	Nodes         int      `json:"nodes"`
	StatusEvery   Seconds  `json:"statusReportSeconds"`
	CreateSeconds Seconds  `json:"createSeconds"`
	Windows       []Window `json:"windows"`
	// StatusErrors and LeaseErrors are the simulated kubelets' failed
	// writes (a late report is no error).
	StatusErrors int64 `json:"statusReportErrors"`
	LeaseErrors  int64 `json:"leaseRenewalErrors"`
}

// Window is one measurement window.
type Window struct {
	// Variant is the agents' watch ("none": no agents, the baseline).
	Variant string  `json:"variant"`
	Agents  int     `json:"agents"`
	Seconds Seconds `json:"seconds"`
	// StartSeconds is from starting the agents to all their watches open.
	StartSeconds Seconds `json:"startSeconds,omitempty"`
	// NodeChanges are the nodes' status reports written in the window.
	NodeChanges int64 `json:"nodeChanges"`
	// NodeEvents and LeaseEvents are the watch events the API server
	// sent, to every watcher.
	NodeEvents  float64 `json:"nodeWatchEvents"`
	LeaseEvents float64 `json:"leaseWatchEvents"`
	// StormEvents are what the agents' storm-protection watches
	// delivered, summed over the agents.
	StormEvents  int64   `json:"stormWatchEvents"`
	APIServerCPU Seconds `json:"apiServerCPUSeconds"`
}

func (w Window) minutes() float64 { return float64(w.Seconds) / 60 }

// baseline is the size's window without agents.
func (s Size) baseline() (Window, bool) {
	for _, w := range s.Windows {
		if w.Agents == 0 {
			return w, true
		}
	}
	return Window{}, false
}

// AgentEventsPerMinute is what one agent received per minute from the
// API server, over all its watches: the window's node and lease events
// less what the other watchers received, per agent. The others' node
// events are the baseline's per node change (the controllers, the
// scheduler and KWOK each watch every node), their lease events the
// baseline's per minute (the node Leases' watchers).
func (s Size) AgentEventsPerMinute(w Window) float64 {
	b, ok := s.baseline()
	if !ok || w.Agents == 0 || w.minutes() == 0 || b.minutes() == 0 {
		return 0
	}
	others := b.EventsPerNodeChange()*float64(w.NodeChanges) + b.LeaseEvents/b.minutes()*w.minutes()
	return max(w.NodeEvents+w.LeaseEvents-others, 0) / float64(w.Agents) / w.minutes()
}

// StormEventsPerMinute is what one agent's storm-protection watch
// delivered per minute.
func (w Window) StormEventsPerMinute() float64 {
	if w.Agents == 0 || w.minutes() == 0 {
		return 0
	}
	return float64(w.StormEvents) / float64(w.Agents) / w.minutes()
}

// EventsPerNodeChange is the node watch events the API server sent per
// node status report, to every watcher.
func (w Window) EventsPerNodeChange() float64 {
	if w.NodeChanges == 0 {
		return 0
	}
	return w.NodeEvents / float64(w.NodeChanges)
}

// APIServerMsPerNodeMinute is the API server's CPU per node per minute
// of the window, in milliseconds.
func (s Size) APIServerMsPerNodeMinute(w Window) float64 {
	if s.Nodes == 0 || w.minutes() == 0 {
		return 0
	}
	return float64(w.APIServerCPU) * 1000 / float64(s.Nodes) / w.minutes()
}

// window returns the size's window of variant v.
func (s Size) window(v Variant) (Window, bool) {
	for _, w := range s.Windows {
		if w.Variant == string(v) {
			return w, true
		}
	}
	return Window{}, false
}

// Targets are the issue's: with the agents as they are, the events an
// agent receives per idle minute do not grow with N (the largest fleet's
// within 1.2 × the smallest's, measurement noise), and the API server's
// CPU per idle node at the largest fleet within 1.5 × its value at the
// smallest.
func Targets(r Report) []report.Target {
	var small, large *Size
	for i := range r.Sizes {
		if _, ok := r.Sizes[i].window(Requests); !ok {
			continue
		}
		if small == nil || r.Sizes[i].Nodes < small.Nodes {
			small = &r.Sizes[i]
		}
		if large == nil || r.Sizes[i].Nodes > large.Nodes {
			large = &r.Sizes[i]
		}
	}
	if small == nil || small == large {
		return nil
	}
	ws, _ := small.window(Requests)
	wl, _ := large.window(Requests)
	ev := ratio(large.AgentEventsPerMinute(wl), small.AgentEventsPerMinute(ws))
	cpu := ratio(large.APIServerMsPerNodeMinute(wl), small.APIServerMsPerNodeMinute(ws))
	return []report.Target{
		{Name: fmt.Sprintf("events an agent receives per idle minute, N = %d vs %d", large.Nodes, small.Nodes), Want: "≤ 1.2 ×",
			Got: fmt.Sprintf("%.2f ×", ev), Met: ev <= 1.2},
		{Name: fmt.Sprintf("API server CPU per idle node, N = %d vs %d", large.Nodes, small.Nodes), Want: "≤ 1.5 ×",
			Got: fmt.Sprintf("%.2f ×", cpu), Met: cpu <= 1.5},
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		if a == 0 {
			return 1
		}
		return a / 1e-9
	}
	return a / b
}

// Markdown renders r.
func Markdown(r Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s at commit %s on %d cores (%s), %s, Kubernetes %s.\n\n",
		r.Date, r.Commit, r.Machine.Cores, r.Machine.CPU, r.Machine.GoVersion, r.Machine.Kubernetes)
	b.WriteString("Idle fleet: each node reports its status every `statusEvery` and renews its Lease; nothing else changes. " +
		"Agents are real rebooters (`internal/reboot.Agent`), each with its own connection.\n\n")
	b.WriteString("| nodes | agents' watch | window | node changes | node events sent per change | events per agent per minute | storm-watch events per agent per minute | API server CPU per node per minute | agents' start |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Sizes {
		for _, w := range s.Windows {
			agentEv, storm, start := "—", "—", "—"
			if w.Agents > 0 {
				agentEv = fmt.Sprintf("%.2f", s.AgentEventsPerMinute(w))
				storm = fmt.Sprintf("%.2f", w.StormEventsPerMinute())
				start = fmt.Sprintf("%.0f s", float64(w.StartSeconds))
			}
			fmt.Fprintf(&b, "| %d | %s | %.0f s | %d | %.1f | %s | %s | %.2f ms | %s |\n", s.Nodes, w.Variant, float64(w.Seconds),
				w.NodeChanges, w.EventsPerNodeChange(), agentEv, storm, s.APIServerMsPerNodeMinute(w), start)
		}
	}
	if len(r.Targets) > 0 {
		b.WriteString("\n| target | aim | measured | met |\n|---|---|---|---|\n")
		for _, t := range r.Targets {
			met := "not met"
			if t.Met {
				met = "met"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.Name, t.Want, t.Got, met)
		}
	}
	return b.String()
}
