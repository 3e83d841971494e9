package hookcli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/openfuyao/npu-stack/internal/cli"
	"github.com/openfuyao/npu-stack/internal/rollout"
	"github.com/openfuyao/npu-stack/internal/window"
)

// NewPlan is `npu-hooks plan`. Policy and selector flags default to what
// the chart gave the rollout Job in --namespace, so the plan is the one
// the next rollout will follow.
func NewPlan(g *cli.GlobalOptions) *cobra.Command {
	var cf clusterFlags
	var pf policyFlags
	var output string
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Print, without changing anything, which nodes the rollout takes in which order, and why others are skipped",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, c, pol, err := readOnlyCommand(cmd, g, output, &cf, &pf)
			if err != nil {
				return err
			}
			s, err := c.Snapshot()
			if err != nil {
				return err
			}
			now := time.Now()
			entries := rollout.Plan(s, pol, now)
			w := cmd.OutOrStdout()
			if format == outputJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(entries)
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			_, _ = fmt.Fprintln(tw, "ORDER\tWAVE\tNODE\tFROM\tTO\tNOTE")
			for _, e := range entries {
				order, wave := "-", "-"
				if e.Order > 0 {
					order, wave = fmt.Sprint(e.Order), fmt.Sprint(e.Wave)
				}
				_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", order, wave, e.Node, dash(e.From), dash(e.To), e.Note)
			}
			if err := tw.Flush(); err != nil {
				return fmt.Errorf("write plan: %w", err)
			}
			for _, m := range s.Missing {
				_, _ = fmt.Fprintf(w, "warning: re-roll target %s not found; it will be skipped\n", m)
			}
			if warn := rollout.NoCanaryWarning(s, pol); warn != "" {
				_, _ = fmt.Fprintf(w, "warning: %s\n", warn)
			}
			if st, ok := window.At(pol.Windows, now); ok {
				_, _ = fmt.Fprintf(w, "maintenance window: %s\n", st.Describe(now))
			}
			return nil
		},
	}
	cf.add(cmd.Flags())
	pf.add(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}
