// Package hookcli holds the npu-hooks commands (rollout, plan, status,
// preflight): flag parsing and wiring; the logic is in internal/rollout and
// internal/preflight.
package hookcli

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/rollout"
	"github.com/openfuyao/npu-stack/internal/window"
)

// clusterFlags locate the NPU nodes and the driver DaemonSets.
type clusterFlags struct {
	client         kube.ClientOptions
	namespace      string
	labelDomain    string
	nodeSelector   string
	driverSelector string
}

func (f *clusterFlags) add(fs *pflag.FlagSet) {
	// 500 QPS / 1000 burst: a rollout writes 7 to 10 times per node
	// (chained state patches and their Events, make bench), and with
	// unlimited parallelism a whole fleet's first writes come at once: at
	// a former 50 QPS a 1,000-node rollout spent minutes in client-side
	// throttling alone. The API server's priority and fairness, not this
	// limit, is what protects the control plane; the informers do the
	// reading.
	f.client.AddFlags(fs, 500, 1000)
	fs.StringVar(&f.namespace, "namespace", "npu-operator", "namespace of the driver DaemonSets and the rollout lease")
	fs.StringVar(&f.labelDomain, "label-domain", contract.DefaultDomain, "domain of the node contract's labels and annotations (the chart's labelDomain)")
	fs.StringVar(&f.nodeSelector, "npu-node-selector", contract.LabelNPUPresent+"=true", "label selector of the NPU nodes (the chart's npuNodeSelector)")
	fs.StringVar(&f.driverSelector, "driver-selector", "app=npu-driver-daemonset", "label selector of the driver DaemonSets in --namespace, one per profile")
}

type parsedCluster struct {
	keys           contract.Keys
	nodeSelector   labels.Selector
	driverSelector labels.Selector
}

func (f *clusterFlags) parse() (parsedCluster, error) {
	var p parsedCluster
	var err error
	if p.keys, err = contract.NewKeys(f.labelDomain); err != nil {
		return p, fmt.Errorf("--label-domain: %w", err)
	}
	if p.nodeSelector, err = parseSelector("--npu-node-selector", f.nodeSelector); err != nil {
		return p, err
	}
	if p.nodeSelector.Empty() {
		return p, fmt.Errorf("--npu-node-selector is empty: it would treat every node as an NPU node; set the chart's npuNodeSelector")
	}
	if p.driverSelector, err = parseSelector("--driver-selector", f.driverSelector); err != nil {
		return p, err
	}
	return p, nil
}

func parseSelector(flag, s string) (labels.Selector, error) {
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%s %q is not a label selector: %w", flag, s, err)
	}
	return sel, nil
}

// policyFlags are driver.upgradePolicy as flags.
type policyFlags struct {
	autoUpgrade, paused                   bool
	maxParallel, maxFailures              int
	maxUnavailable, canary                string
	waitSelector                          string
	waitTimeout                           time.Duration
	podDelForce, podDelEmptyDir           bool
	podDelTimeout                         time.Duration
	drain, drainForce, drainEmptyDir      bool
	drainSelector                         string
	drainTimeout, rebootTimeout, deadline time.Duration
	reroll                                []string
	windows                               []string
	settle                                time.Duration
}

func (f *policyFlags) add(fs *pflag.FlagSet) {
	fs.BoolVar(&f.autoUpgrade, "auto-upgrade", false, "upgrade reboots need no approval (executed by npu-rebooter; shown by status)")
	fs.BoolVar(&f.paused, "paused", false, "start no new node; nodes in flight finish")
	fs.IntVar(&f.maxParallel, "max-parallel-upgrades", 1, "nodes upgraded at once; 0 = unlimited")
	fs.StringVar(&f.maxUnavailable, "max-unavailable", "25%", "most NPU nodes unavailable at once (int or percentage, rounded up), counting nodes cordoned or NotReady")
	fs.IntVar(&f.maxFailures, "max-failures", 1, "failed nodes after which no new node starts; 0 = no limit")
	fs.StringVar(&f.canary, "canary-selector", "", "label selector of canary nodes, upgraded and validated before all others")
	fs.StringVar(&f.waitSelector, "wait-for-completion-selector", "", "label selector of pods to wait for on a node before evicting anything")
	fs.DurationVar(&f.waitTimeout, "wait-for-completion-timeout", 0, "how long to wait for those pods; 0 = forever")
	fs.BoolVar(&f.podDelForce, "npu-pod-deletion-force", false, "also delete NPU pods not managed by a controller")
	fs.DurationVar(&f.podDelTimeout, "npu-pod-deletion-timeout", 5*time.Minute, "time allowed for NPU pod eviction; 0 = forever")
	fs.BoolVar(&f.podDelEmptyDir, "npu-pod-deletion-delete-emptydir", false, "evict NPU pods even if they use emptyDir volumes")
	fs.BoolVar(&f.drain, "drain", false, "drain the whole node (not only NPU pods) before the reboot")
	fs.BoolVar(&f.drainForce, "drain-force", false, "drain pods not managed by a controller too")
	fs.StringVar(&f.drainSelector, "drain-selector", "", "drain only pods matching this label selector")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", 5*time.Minute, "time allowed for the drain; 0 = forever")
	fs.BoolVar(&f.drainEmptyDir, "drain-delete-emptydir", false, "drain pods with emptyDir volumes")
	fs.DurationVar(&f.rebootTimeout, "reboot-timeout", 30*time.Minute, "a node not back and valid this long after its reboot started fails")
	fs.DurationVar(&f.deadline, "deadline", time.Hour, "give up (exit 2, progress kept on the nodes) after this long; 0 = never")
	fs.StringArrayVar(&f.reroll, "reroll", nil, "DaemonSet re-rolled on a node after its driver changed: namespace/name or namespace/selector:<selector> (repeatable)")
	fs.StringArrayVar(&f.windows, "maintenance-window", nil,
		`maintenance window in which nodes are admitted (cordoned), "<days> <start>-<end> <IANA time zone> [finish|wait]", such as "sat,sun 22:00-04:00 Europe/Berlin wait": `+
			`days mon..sun, times HH:MM[:SS] (an end at or before the start is on the next day), finish or wait says whether a node in flight reboots after the close or waits for the next opening (repeatable; none: any time)`)
	fs.DurationVar(&f.settle, "settle", 0, "pause between one node's return from its upgrade and the next node's start; 0 = none")
}

func (f *policyFlags) parse() (rollout.Policy, []rollout.TargetSpec, error) {
	p := rollout.Policy{
		AutoUpgrade: f.autoUpgrade, Paused: f.paused, MaxParallel: f.maxParallel, MaxFailures: f.maxFailures,
		MaxUnavailable: intstr.Parse(f.maxUnavailable),
		PodDeletion:    rollout.EvictPolicy{Force: f.podDelForce, Timeout: f.podDelTimeout, DeleteEmptyDir: f.podDelEmptyDir},
		Drain: rollout.DrainPolicy{Enable: f.drain, Selector: f.drainSelector,
			EvictPolicy: rollout.EvictPolicy{Force: f.drainForce, Timeout: f.drainTimeout, DeleteEmptyDir: f.drainEmptyDir}},
		RebootTimeout: f.rebootTimeout,
	}
	switch {
	case f.maxParallel < 0:
		return p, nil, fmt.Errorf("--max-parallel-upgrades %d: must be 0 (unlimited) or more", f.maxParallel)
	case f.maxFailures < 0:
		return p, nil, fmt.Errorf("--max-failures %d: must be 0 (no limit) or more", f.maxFailures)
	case f.rebootTimeout < 0, f.waitTimeout < 0, f.podDelTimeout < 0, f.drainTimeout < 0, f.deadline < 0, f.settle < 0:
		return p, nil, fmt.Errorf("timeouts, --settle and --deadline must not be negative")
	}
	var err error
	if p.Windows, err = window.ParseAll(f.windows); err != nil {
		return p, nil, fmt.Errorf("--maintenance-window (driver.upgradePolicy.maintenanceWindows): %w", err)
	}
	p.Settle = f.settle
	if _, err := rollout.ResolveMaxUnavailable(p.MaxUnavailable, 100); err != nil {
		return p, nil, fmt.Errorf("--max-unavailable: %w", err)
	}
	if p.Canary, err = parseSelector("--canary-selector", f.canary); err != nil {
		return p, nil, err
	}
	if f.waitSelector != "" {
		if p.WaitForCompletion.Selector, err = parseSelector("--wait-for-completion-selector", f.waitSelector); err != nil {
			return p, nil, err
		}
	}
	p.WaitForCompletion.Timeout = f.waitTimeout
	if f.drainSelector != "" {
		if _, err := parseSelector("--drain-selector", f.drainSelector); err != nil {
			return p, nil, err
		}
	}
	var targets []rollout.TargetSpec
	for _, r := range f.reroll {
		t, err := rollout.ParseTarget(r)
		if err != nil {
			return p, nil, fmt.Errorf("--reroll: %w", err)
		}
		targets = append(targets, t)
	}
	return p, targets, nil
}
