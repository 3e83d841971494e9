// Package rebootercli builds the npu-rebooter command line: flag parsing
// and wiring of the reboot agent (internal/reboot), so that cmd/npu-rebooter
// stays a thin entry point.
package rebootercli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/metadata"

	"github.com/openfuyao/npu-stack/internal/budget"
	"github.com/openfuyao/npu-stack/internal/cli"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/host/agenthost"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/reboot"
	"github.com/openfuyao/npu-stack/internal/window"
)

// Name is the program's name in its usage and errors.
const Name = "npu-rebooter"

// NewRoot is the whole npu-rebooter command: the root and its run command.
func NewRoot() *cobra.Command {
	var opts cli.GlobalOptions
	root := cli.NewRoot(Name, "Per-node agent that executes approved reboots of NPU nodes", &opts)
	root.AddCommand(newRun(&opts))
	return root
}

type runFlags struct {
	kube                 kube.ClientOptions
	nodeName, namespace  string
	domain, npuSelector  string
	method               string
	autoUpgrade          bool
	autoRecover          bool
	maxWedged            string
	uptimeGuard          time.Duration
	slots                int
	slotTTL              time.Duration
	maxReboots           int
	budgetWindow         time.Duration
	metricsAddr          string
	hostRoot             string
	dbusSocket           string
	rebootAttempts       int
	fallbackMethod       string
	issueTimeout, resync time.Duration
	recoveryDrainTimeout time.Duration
	recoveryWindows      []string
}

func newRun(opts *cli.GlobalOptions) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Watch this node and carry out its authorised reboots (DaemonSet agent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := opts.Logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			keys, err := contract.NewKeys(f.domain)
			if err != nil {
				return fmt.Errorf("--label-domain: %w", err)
			}
			selector, err := labels.Parse(f.npuSelector)
			if err != nil {
				return fmt.Errorf("--npu-node-selector %q: %w", f.npuSelector, err)
			}
			maxWedged := intstr.Parse(f.maxWedged)
			if _, err := intstr.GetScaledValueFromIntOrPercent(&maxWedged, 100, true); err != nil {
				return fmt.Errorf("--max-wedged-nodes %q: want a count such as 3 or a percentage such as 10%%: %w", f.maxWedged, err)
			}
			if f.maxReboots < 1 || f.budgetWindow <= 0 {
				return fmt.Errorf("--max-reboots %d / --budget-window %s: both must be positive", f.maxReboots, f.budgetWindow)
			}
			method, err := host.ParseRebootMethod(f.method)
			if err != nil {
				return fmt.Errorf("--method: %w", err)
			}
			if f.rebootAttempts < 1 {
				return fmt.Errorf("--reboot-attempts %d: must be at least 1 (rebooter.rebootAttempts)", f.rebootAttempts)
			}
			recoveryWindows, err := window.ParseAll(f.recoveryWindows)
			if err != nil {
				return fmt.Errorf("--recovery-window (recoveryPolicy.maintenanceWindows): %w", err)
			}
			var fallback host.RebootMethod
			if f.fallbackMethod != "none" {
				if fallback, err = host.ParseRebootMethod(f.fallbackMethod); err != nil {
					return fmt.Errorf("--fallback-method: %w, or none (rebooter.fallbackMethod)", err)
				}
			}
			linux := host.NewLinux(f.hostRoot)
			linux.DBusSocket = f.dbusSocket
			h, err := agenthost.Select(linux)
			if err != nil {
				return fmt.Errorf("choose the host: %w", err)
			}
			client, cfg, err := f.kube.Client()
			if err != nil {
				return err
			}
			md, err := metadata.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("create metadata client: %w", err)
			}
			rec := kube.NewRecorder(client, "npu-rebooter")
			defer rec.Shutdown()
			agent, err := reboot.New(reboot.Config{
				NodeName:  f.nodeName,
				Namespace: f.namespace,
				Policy: reboot.Policy{
					Keys:            keys,
					AutoUpgrade:     f.autoUpgrade,
					AutoRecover:     f.autoRecover,
					MaxWedgedNodes:  maxWedged,
					UptimeGuard:     f.uptimeGuard,
					Budget:          budget.Budget{Max: f.maxReboots, Window: f.budgetWindow},
					IssueTimeout:    f.issueTimeout,
					RecoveryWindows: recoveryWindows,
				},
				Method:               method,
				FallbackMethod:       fallback,
				RebootAttempts:       f.rebootAttempts,
				NPUNodeSelector:      selector,
				Slots:                f.slots,
				SlotTTL:              f.slotTTL,
				RecoveryDrainTimeout: f.recoveryDrainTimeout,
				MetricsAddr:          f.metricsAddr,
				Resync:               f.resync,
				Client:               client,
				Metadata:             md,
				Host:                 h,
				Clock:                host.ClockOf(h),
				Recorder:             rec,
				Log:                  log,
			})
			if err != nil {
				return err
			}
			return agent.Run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	f.kube.AddFlags(fs, 5, 10)
	fs.StringVar(&f.nodeName, "node-name", "", "this node's name (from the downward API)")
	fs.StringVar(&f.namespace, "namespace", "", "namespace of the reboot-slot Leases (the chart's namespace)")
	fs.StringVar(&f.domain, "label-domain", contract.DefaultDomain, "domain of the node-contract labels and annotations")
	fs.StringVar(&f.npuSelector, "npu-node-selector", contract.LabelNPUPresent+"=true", "label selector of the NPU nodes, counted by the storm protection")
	fs.StringVar(&f.method, "method", string(host.RebootSystemd), "reboot method: systemd (clean reboot over the host's D-Bus system bus, as systemctl reboot: logind first, so the kubelet's graceful node shutdown runs, systemd where there is no logind; systemctl is an alias) or sysrq (immediate kernel reboot)")
	fs.StringVar(&f.dbusSocket, "dbus-socket", host.DefaultDBusSocket, "the host's D-Bus system bus socket, for --method=systemd (the chart mounts the host's directory /run/dbus, so a restarted dbus-daemon's new socket is seen)")
	fs.IntVar(&f.rebootAttempts, "reboot-attempts", reboot.DefaultRebootAttempts, "failed attempts of one pending reboot with --method before the rebooter tries --fallback-method, or stops trying and says so in a RebootFailed event")
	fs.StringVar(&f.fallbackMethod, "fallback-method", "none", "reboot method tried once --method has failed --reboot-attempts times: none or sysrq")
	fs.BoolVar(&f.autoUpgrade, "auto-upgrade", false, "reboot for reason upgrade without an approve-reboot annotation")
	fs.BoolVar(&f.autoRecover, "auto-recover", false, "reboot for reason recovery without an approve-reboot annotation")
	fs.StringVar(&f.maxWedged, "max-wedged-nodes", "10%", "storm protection: automatic recovery pauses while more NPU nodes than this (count or percentage) wait for a recovery reboot")
	fs.DurationVar(&f.uptimeGuard, "uptime-guard", 10*time.Minute, "no reboot within this long of boot")
	fs.IntVar(&f.slots, "slots", 1, "nodes rebooting at once, cluster-wide")
	fs.DurationVar(&f.slotTTL, "slot-ttl", time.Hour, "a reboot slot whose holder stops renewing it frees itself after this long")
	fs.IntVar(&f.maxReboots, "max-reboots", 3, "loop guard: reboots that did not achieve their purpose allowed within --budget-window; then refuse until an admin clears the reboot-history annotation")
	fs.DurationVar(&f.budgetWindow, "budget-window", time.Hour, "loop guard window")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "address of the Prometheus /metrics endpoint, such as :9402; empty turns it off")
	fs.StringVar(&f.hostRoot, "host-root", "/", "where the host's root filesystem is mounted")
	fs.DurationVar(&f.issueTimeout, "reboot-command-timeout", 5*time.Minute, "after the reboot command returns, how long the machine may stay up before the attempt counts as failed")
	fs.DurationVar(&f.recoveryDrainTimeout, "recovery-drain-timeout", reboot.DefaultRecoveryDrainTimeout, "before a recovery reboot, wait at most this long for the wedged node's NPU pods to terminate, then reboot anyway, naming the pods left terminating in a RecoveryDrainTimedOut event (never longer than half of --slot-ttl)")
	fs.DurationVar(&f.resync, "resync", 5*time.Minute, "re-evaluate the node this often even without a change")
	fs.StringArrayVar(&f.recoveryWindows, "recovery-window", nil,
		`maintenance window of automatic recovery reboots (--auto-recover), judged on this node's clock: "<days> <start>-<end> <IANA time zone>", such as "sat,sun 22:00-04:00 Europe/Berlin"; outside every window a wedged node is cordoned and its NPU pods evicted, and the reboot waits (an approval does not). Repeatable; none: any time`)
	_ = cmd.MarkFlagRequired("node-name")
	_ = cmd.MarkFlagRequired("namespace")
	return cmd
}
