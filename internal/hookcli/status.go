package hookcli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/openfuyao/npu-stack/internal/cli"
	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/rollout"
)

type outputFormat string

const (
	outputTable outputFormat = "table"
	outputJSON  outputFormat = "json"
)

func parseOutput(s string) (outputFormat, error) {
	switch f := outputFormat(s); f {
	case outputTable, outputJSON, "wide":
		if f == "wide" {
			return outputTable, nil
		}
		return f, nil
	}
	return "", fmt.Errorf("-o %q: use table or json", s)
}

// readOnly builds a controller that never acts, for status and plan.
func readOnly(ctx context.Context, fs *pflag.FlagSet, f *clusterFlags, pf *policyFlags, log logrus.FieldLogger) (*rollout.Controller, rollout.Policy, error) {
	client, _, err := f.client.Client()
	if err != nil {
		return nil, rollout.Policy{}, err
	}
	// Flags the user did not set come from the chart's rollout Job.
	args, from, err := chartRolloutArgs(ctx, client, f.namespace)
	if err != nil {
		return nil, rollout.Policy{}, err
	}
	if args != nil {
		if err := adopt(fs, args); err != nil {
			return nil, rollout.Policy{}, err
		}
		log.WithField("from", from).Debug("using the rollout's policy")
	}
	cl, err := f.parse()
	if err != nil {
		return nil, rollout.Policy{}, cli.Terminal(err)
	}
	pol, targets, err := pf.parse()
	if err != nil {
		return nil, rollout.Policy{}, cli.Terminal(err)
	}
	c := rollout.NewController(rollout.Config{
		Client: client, Log: log, Keys: cl.keys, Namespace: f.namespace,
		NodeSelector: cl.nodeSelector, DriverSelector: cl.driverSelector, Targets: targets, Policy: pol,
	})
	return c, pol, c.Start(ctx)
}

// readOnlyCommand is the shared start of status and plan: output format,
// logger, and a started read-only controller.
func readOnlyCommand(cmd *cobra.Command, g *cli.GlobalOptions, output string, cf *clusterFlags, pf *policyFlags) (outputFormat, *rollout.Controller, rollout.Policy, error) {
	format, err := parseOutput(output)
	if err != nil {
		return "", nil, rollout.Policy{}, cli.Terminal(err)
	}
	log, err := g.Logger(cmd.ErrOrStderr())
	if err != nil {
		return "", nil, rollout.Policy{}, cli.Terminal(err)
	}
	c, pol, err := readOnly(cmd.Context(), cmd.Flags(), cf, pf, log)
	return format, c, pol, err
}

// NewStatus is `npu-hooks status`. Policy and selector flags default to
// what the chart gave the rollout Job in --namespace.
func NewStatus(g *cli.GlobalOptions) *cobra.Command {
	var cf clusterFlags
	var pf policyFlags
	var output string
	var watch bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every NPU node's upgrade state, loaded and desired driver, reboot and readiness",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			format, c, _, err := readOnlyCommand(cmd, g, output, &cf, &pf)
			if err != nil {
				return err
			}
			for {
				s, d, err := c.Decide()
				if err != nil {
					return err
				}
				st, err := withBlockers(ctx, &cf, rollout.BuildStatus(s, d, time.Now()))
				if err != nil {
					return err
				}
				if err := PrintStatus(cmd.OutOrStdout(), st, format, cf.namespace); err != nil {
					return err
				}
				if !watch || !c.WaitForChange(ctx) {
					return nil
				}
			}
		},
	}
	cf.add(cmd.Flags())
	pf.add(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "print again on every change (Ctrl-C to stop)")
	return cmd
}

// withBlockers asks each node that is not idle for the events in which
// the rebooter or a refused eviction says why it waits.
func withBlockers(ctx context.Context, cf *clusterFlags, st rollout.Status) (rollout.Status, error) {
	client, _, err := cf.client.Client()
	if err != nil {
		return st, err
	}
	blockers := map[string]string{}
	for _, r := range st.Nodes {
		if r.SinceTime().IsZero() && !r.RebootRequired {
			continue
		}
		evs, err := client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": "Node", "involvedObject.name": r.Node}.String(),
		})
		if err != nil {
			return st, fmt.Errorf("events of node %s: %w", r.Node, err)
		}
		blockers[r.Node] = rollout.Blocker(evs.Items, r.SinceTime())
	}
	return rollout.WithBlockers(st, blockers), nil
}

// PrintStatus writes st as `npu-hooks status` prints it, in format
// ("table" or "json"); namespace is the chart's, for the commands it
// names. The documentation's examples are checked against it.
func PrintStatus(w io.Writer, st rollout.Status, format outputFormat, namespace string) error {
	if format == outputJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return fmt.Errorf("write status: %w", err)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NODE\tSTATE\tLOADED\tDESIRED\tREBOOT\tAPPROVED\tREADY\tSINCE\tNOTE")
	for _, r := range st.Nodes {
		reboot := "-"
		if r.RebootRequired {
			reboot = "required(" + r.RebootReason + ")"
		}
		ready := strconv.FormatBool(r.Ready)
		if r.Cordoned {
			ready += ",cordoned"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\t%s\t%s\t%s\n", r.Node, r.State, dash(r.Loaded), dash(r.Desired), reboot, r.Approved, ready, dash(r.Since), r.Note)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	if _, err := fmt.Fprintf(w, "progress: %s (%s)\n", st.Summary, st.Outcome); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	// The driver pods' installs: what each waits for, and the one
	// command that makes it try again now.
	for _, r := range st.Nodes {
		if r.Install == "" {
			continue
		}
		line := fmt.Sprintf("driver install on %s: %s\n", r.Node, r.Install)
		if strings.HasPrefix(r.Install, "blocked") || strings.HasPrefix(r.Install, "failed") {
			line += fmt.Sprintf("  try again now: %s\n", contract.DriverRetryCommand(namespace, r.Node))
		}
		if _, err := io.WriteString(w, line); err != nil {
			return fmt.Errorf("write status: %w", err)
		}
	}
	for _, r := range st.Nodes {
		if r.Injection == "" {
			continue
		}
		if _, err := fmt.Fprintf(w, "workload injection on %s: %s\n", r.Node, r.Injection); err != nil {
			return fmt.Errorf("write status: %w", err)
		}
	}
	for _, l := range st.LeftBehind {
		if _, err := fmt.Fprintf(w, "left behind: %s: %s\n", l.Node, l.Reason); err != nil {
			return fmt.Errorf("write status: %w", err)
		}
	}
	if st.Window != nil {
		if _, err := fmt.Fprintln(w, st.Window.Line()); err != nil {
			return fmt.Errorf("write status: %w", err)
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
