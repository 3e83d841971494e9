package hookcli

import (
	"context"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/openfuyao/npu-stack/internal/cli"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/uninstall"
)

// NewUninstall is `npu-hooks uninstall`, run by hand after helm uninstall
// or as the chart's pre-delete hook (uninstall.cleanup).
func NewUninstall(g *cli.GlobalOptions) *cobra.Command {
	var (
		client                             kube.ClientOptions
		namespace, release, domain, leaseN string
		dryRun                             bool
		timeout                            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Take npu-stack off the cluster: stop the rollout, remove its node keys, lift its cordons, delete what the release leaves behind",
		Long: `In this order, so that no step of npu-stack races the next:

 1. stops the rollout: deletes the resume CronJob, the rollout and
    preflight Jobs of --release and their pods, then the rollout's Lease
    and its records (the ConfigMaps npu-hooks timeline draws from);
 2. stops the node agents: marks the driver DaemonSets, deletes every
    DaemonSet of the release and waits for their pods (not for the fleet
    exporter's, a Deployment's, which writes nothing and which Helm
    deletes after the pre-delete hook); a driver pod that
    stops this way removes npu-stack's files from its host (the CDI spec,
    the marker directory, /var/lib/npu-stack). After helm uninstall the
    DaemonSets are gone already: those files then stay;
 3. removes every label and annotation under --label-domain from every
    Node and uncordons the nodes npu-stack cordoned (a driver upgrade or a
    recovery reboot holds them), and only those: a node cordoned before
    stays cordoned;
 4. deletes the reboot-slot Leases.

The installed driver stays on the hosts, and so do the labels npu-stack
does not write (openfuyao.com/npu.present, Node Feature Discovery's). Run
again, it finds nothing left to do. Exit codes: 0 done; 2 invalid flags;
1 anything else (run it again).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Every line goes to stdout; the log flags are checked as
			// every command checks them.
			if _, err := g.Logger(cmd.ErrOrStderr()); err != nil {
				return cli.Terminal(err)
			}
			keys, err := contract.NewKeys(domain)
			if err != nil {
				return cli.Terminalf("--label-domain: %w", err)
			}
			if timeout <= 0 {
				return cli.Terminalf("--timeout %s: must be positive", timeout)
			}
			c, _, err := client.Client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			cfg := uninstall.Config{
				Client: c, Keys: keys, Namespace: namespace, Release: release, LeaseName: leaseN,
				Request: string(uuid.NewUUID()), DryRun: dryRun, Out: cmd.OutOrStdout(),
			}
			if err := cfg.Validate(); err != nil {
				return cli.Terminal(err)
			}
			_, err = uninstall.Run(ctx, cfg)
			return err
		},
	}
	fs := cmd.Flags()
	client.AddFlags(fs, 50, 100)
	fs.StringVar(&namespace, "namespace", "npu-operator", "namespace npu-stack was installed in")
	fs.StringVar(&release, "release", "npu-stack", "Helm release name (the chart's objects carry app.kubernetes.io/instance=<release>)")
	fs.StringVar(&domain, "label-domain", contract.DefaultDomain, "domain of the node contract's labels and annotations (the chart's labelDomain): every key under it is removed")
	fs.StringVar(&leaseN, "lease-name", "npu-stack-rollout", "the rollout's Lease in --namespace (npu-hooks rollout --lease-name)")
	fs.BoolVar(&dryRun, "dry-run", false, "print what would be done; change nothing")
	fs.DurationVar(&timeout, "timeout", 30*time.Minute, "give up after this long (a driver pod stopping lets a running driver install finish, up to driver.installTimeoutSeconds)")
	return cmd
}
