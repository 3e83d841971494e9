package report

// Agent is one node agent process measured idle and through one reboot.
type Agent struct {
	Name string `json:"name"`
	// Idle: over IdleWindow with nothing to do.
	IdleWindow Seconds `json:"idleWindowSeconds"`
	IdleCPU    Seconds `json:"idleCPUSeconds"`
	IdlePeakMB float64 `json:"idlePeakRSSMiB"`
	Busy       string  `json:"busy"` // what the busy phase was
	BusyWindow Seconds `json:"busyWindowSeconds"`
	BusyCPU    Seconds `json:"busyCPUSeconds"`
	PeakMB     float64 `json:"peakRSSMiB"`
	// AnonMB is the anonymous part of the resident set at the end (heap
	// and stacks; the rest are pages of the executable).
	AnonMB float64 `json:"anonRSSMiBAtEnd"`
	// BaselineMB is the peak RSS of `<binary> --help`: what loading the
	// executable costs before any work.
	BaselineMB  float64 `json:"helpPeakRSSMiB"`
	StartupCPU  Seconds `json:"startupCPUSeconds"`
	ProbePeriod Seconds `json:"probeIntervalSeconds,omitempty"`
}

// IdleCPUPercent is the idle CPU use as a percentage of one core.
func (a Agent) IdleCPUPercent() float64 {
	if a.IdleWindow <= 0 {
		return 0
	}
	return float64(a.IdleCPU/a.IdleWindow) * 100
}

// Wedge is the health-watch's detection latency.
type Wedge struct {
	Interval  Seconds `json:"probeIntervalSeconds"`
	Threshold int     `json:"failureThreshold"`
	// Total is from the wedge to reboot-required=true seen on the Node.
	Total Seconds `json:"wedgeToRebootRequiredSeconds"`
	// Beyond is from the threshold-th failed probe (the moment the probe
	// schedule allows the decision) to reboot-required seen.
	Beyond Seconds `json:"beyondProbeScheduleSeconds"`
}

// Machine describes where the benchmark ran.
type Machine struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	GoVersion  string `json:"goVersion"`
	Kubernetes string `json:"kubernetes"`
	OS         string `json:"os"`
}
