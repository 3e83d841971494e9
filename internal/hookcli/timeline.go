package hookcli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/openfuyao/npu-stack/internal/atomicfile"
	"github.com/openfuyao/npu-stack/internal/cli"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/rolloutrecord"
	"github.com/openfuyao/npu-stack/internal/timeline"
)

type timelineFlags struct {
	client    kube.ClientOptions
	namespace string
	record    string
	selector  string
	output    string
	list      bool
}

// NewTimeline is `npu-hooks timeline`: a rollout record drawn as SVG.
func NewTimeline(_ *cli.GlobalOptions) *cobra.Command {
	var f timelineFlags
	cmd := &cobra.Command{
		Use:   "timeline",
		Short: "Draw a rollout's record as an SVG picture: a row per node, a band per upgrade state, approvals and reboots marked",
		Long: `Reads a rollout record (a ConfigMap <lease-name>-record-<version> the rollout
keeps in --namespace: each node's state changes, approvals, reboots and
each run's outcome) and writes it as an SVG picture. Without --record it
draws the record written to last. --list names the records instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, _, err := f.client.Client()
			if err != nil {
				return err
			}
			return runTimeline(cmd.Context(), client, &f, cmd.OutOrStdout(), time.Now())
		},
	}
	fs := cmd.Flags()
	f.client.AddFlags(fs, 20, 40)
	fs.StringVar(&f.namespace, "namespace", "npu-operator", "namespace of the rollout records (the chart's)")
	fs.StringVar(&f.record, "record", "", "name of the record's ConfigMap (default: the one written to last)")
	fs.StringVar(&f.selector, "selector", rolloutrecord.ComponentLabel+"="+rolloutrecord.Component, "label selector of the rollout records")
	fs.StringVarP(&f.output, "output", "o", "rollout-timeline.svg", "file to write the SVG to; - for standard output")
	fs.BoolVar(&f.list, "list", false, "list the records (name, versions, outcome, entries, last entry) instead of drawing one")
	return cmd
}

func runTimeline(ctx context.Context, client kubernetes.Interface, f *timelineFlags, out io.Writer, now time.Time) error {
	list, err := client.CoreV1().ConfigMaps(f.namespace).List(ctx, metav1.ListOptions{LabelSelector: f.selector})
	if err != nil {
		return fmt.Errorf("list the rollout records in %s (%s): %w", f.namespace, f.selector, err)
	}
	var recs []rolloutrecord.Record
	for _, cm := range list.Items {
		r, err := rolloutrecord.Decode(cm.Name, cm.Data)
		if err != nil {
			return err
		}
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Last().After(recs[j].Last()) })
	if f.list {
		for _, r := range recs {
			o := r.Outcome()
			if o == "" {
				o = "running"
			}
			_, _ = fmt.Fprintf(out, "%s\tdriver %s\t%s\t%d entries\tlast %s\n", r.Name, r.Versions, o, len(r.Entries), r.Last().UTC().Format(time.RFC3339))
		}
		return nil
	}
	var rec *rolloutrecord.Record
	for i := range recs {
		if f.record == "" || recs[i].Name == f.record {
			rec = &recs[i]
			break
		}
	}
	if rec == nil {
		if f.record != "" {
			return cli.Terminalf("no rollout record %s in %s: list them with `npu-hooks timeline --list --namespace %s`", f.record, f.namespace, f.namespace)
		}
		return cli.Terminalf("no rollout record in %s (%s): a rollout keeps one once it moves a node (npu-hooks rollout --record)", f.namespace, f.selector)
	}
	// A running rollout is drawn up to now; a finished one up to its end.
	end := time.Time{}
	if rec.Outcome() == "" {
		end = now
	}
	svg := timeline.Render(timeline.Build(*rec, end))
	if f.output == "-" {
		_, err := out.Write(svg)
		return err
	}
	if err := atomicfile.Write(f.output, svg, 0o644); err != nil {
		return fmt.Errorf("write the timeline of %s to %s: %w", rec.Name, f.output, err)
	}
	_, _ = fmt.Fprintf(out, "wrote %s: %s, %d nodes, %d entries\n", f.output, timeline.Build(*rec, end).Title, len(rec.Nodes()), len(rec.Entries))
	return nil
}
