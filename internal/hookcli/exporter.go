package hookcli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/openfuyao/npu-stack/internal/cli"
	"github.com/openfuyao/npu-stack/internal/fleetmetrics"
	"github.com/openfuyao/npu-stack/internal/rolloutrecord"
)

type exporterFlags struct {
	cluster        clusterFlags
	listen         string
	autoUpgrade    bool
	autoRecover    bool
	rebootTimeout  time.Duration
	jobSelector    string
	recordSelector string
}

// NewExporter is `npu-hooks exporter`: the fleet's state as Prometheus
// series, from an always-on Deployment (internal/fleetmetrics).
func NewExporter(g *cli.GlobalOptions) *cobra.Command {
	var f exporterFlags
	cmd := &cobra.Command{
		Use:   "exporter",
		Short: "Serve the NPU fleet's upgrade and reboot state as Prometheus metrics (npu_fleet_*)",
		Long: `Watches the NPU nodes, the driver DaemonSets, the rollout Jobs and the rollout
records, and serves on /metrics the series docs/observability.md lists
(npu_fleet_*): nodes per upgrade state and driver version, nodes awaiting
a reboot approval, nodes npu-stack reboots on purpose, the newest rollout
Job's status and each rollout record's outcome. It runs off the NPU nodes,
so its series stay while a node reboots. Read-only: it writes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.Logger(cmd.ErrOrStderr())
			if err != nil {
				return cli.Terminal(err)
			}
			w, p, err := f.parse()
			if err != nil {
				return cli.Terminal(err)
			}
			client, _, err := f.cluster.client.Client()
			if err != nil {
				return err
			}
			w.Client = client
			inf := fleetmetrics.NewInformers(w)
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			srv := fleetmetrics.Server{Addr: f.listen, Ready: inf.Synced,
				Collector: fleetmetrics.NewCollector(inf.Inputs, p, time.Now)}
			served := make(chan error, 1)
			go func() { served <- srv.Run(ctx, nil) }()
			if err := inf.Start(ctx); err != nil {
				return err
			}
			log.WithField("address", f.listen).Info("serving the fleet's metrics on /metrics")
			select {
			case err := <-served:
				return err
			case <-ctx.Done():
				return <-served
			}
		},
	}
	fs := cmd.Flags()
	f.cluster.add(fs)
	fs.StringVar(&f.listen, "metrics-addr", ":9404", "address of the /metrics and /readyz endpoint")
	fs.BoolVar(&f.autoUpgrade, "auto-upgrade", false, "upgrade reboots need no approval (driver.upgradePolicy.autoUpgrade)")
	fs.BoolVar(&f.autoRecover, "auto-recover", false, "recovery reboots need no approval (recoveryPolicy.autoRecover)")
	fs.DurationVar(&f.rebootTimeout, "reboot-timeout", 30*time.Minute, "a started reboot counts as planned for at most this long (driver.upgradePolicy.rebootTimeoutSeconds)")
	fs.StringVar(&f.jobSelector, "rollout-job-selector", "app.kubernetes.io/component in (rollout,rollout-resume)", "label selector of the rollout Jobs in --namespace")
	fs.StringVar(&f.recordSelector, "record-selector", "", "label selector of the rollout records (ConfigMaps) in --namespace; empty: records are not read")
	return cmd
}

func (f *exporterFlags) parse() (fleetmetrics.Watch, fleetmetrics.Policy, error) {
	cl, err := f.cluster.parse()
	if err != nil {
		return fleetmetrics.Watch{}, fleetmetrics.Policy{}, err
	}
	jobs, err := parseSelector("--rollout-job-selector", f.jobSelector)
	if err != nil {
		return fleetmetrics.Watch{}, fleetmetrics.Policy{}, err
	}
	if f.rebootTimeout < 0 {
		return fleetmetrics.Watch{}, fleetmetrics.Policy{}, fmt.Errorf("--reboot-timeout %s: must not be negative", f.rebootTimeout)
	}
	w := fleetmetrics.Watch{Keys: cl.keys, Namespace: f.cluster.namespace, NodeSelector: cl.nodeSelector,
		DriverSelector: cl.driverSelector, JobSelector: jobs, RecordSelector: labels.Nothing()}
	if f.recordSelector != "" {
		if w.RecordSelector, err = parseSelector("--record-selector", f.recordSelector); err != nil {
			return fleetmetrics.Watch{}, fleetmetrics.Policy{}, err
		}
		w.ReadRecord = readRecord
	}
	return w, fleetmetrics.Policy{AutoUpgrade: f.autoUpgrade, AutoRecover: f.autoRecover, PlannedRebootTimeout: f.rebootTimeout}, nil
}

// readRecord is what the exporter reports of a rollout record.
func readRecord(cm *corev1.ConfigMap) (fleetmetrics.Record, error) {
	r, err := rolloutrecord.Decode(cm.Name, cm.Data)
	if err != nil {
		return fleetmetrics.Record{}, err
	}
	return fleetmetrics.Record{Name: r.Name, Outcome: r.Outcome(), Last: r.Last(), Entries: len(r.Entries), Dropped: r.Dropped}, nil
}
