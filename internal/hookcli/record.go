package hookcli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/openfuyao/npu-stack/internal/rollout"
	"github.com/openfuyao/npu-stack/internal/rolloutrecord"
)

// recordFlags configure the rollout record (internal/rolloutrecord).
type recordFlags struct {
	enabled    bool
	labels     string
	maxEntries int
	keep       int
}

func (f *recordFlags) add(fs *pflag.FlagSet) {
	fs.BoolVar(&f.enabled, "record", true, "keep the rollout's record (each node's state changes, approvals, reboots, outcomes) in a ConfigMap <lease-name>-record-<version> in --namespace, for `npu-hooks timeline` and the fleet exporter")
	fs.StringVar(&f.labels, "record-labels", "", "extra labels of the record ConfigMap, k=v,... (the chart's app.kubernetes.io/instance)")
	fs.IntVar(&f.maxEntries, "record-max-entries", rolloutrecord.DefaultMaxEntries, "entries a record keeps; the oldest go first")
	fs.IntVar(&f.keep, "record-keep", rolloutrecord.DefaultKeep, "records (rollouts) kept in --namespace; older ones are deleted")
}

// recorder sets up the record of the rollout to the driver DaemonSets'
// desired versions, reading what an earlier run left; nil when no record
// is kept (--record=false, or no driver DaemonSet: nothing to roll).
func (f *recordFlags) recorder(ctx context.Context, client kubernetes.Interface, cl parsedCluster, namespace, leaseName string, log logrus.FieldLogger) (*rolloutrecord.Recorder, error) {
	if !f.enabled {
		return nil, nil
	}
	if f.maxEntries < 1 || f.keep < 1 {
		return nil, fmt.Errorf("--record-max-entries %d and --record-keep %d: both must be at least 1", f.maxEntries, f.keep)
	}
	extra, err := labels.ConvertSelectorToLabelsMap(f.labels)
	if err != nil {
		return nil, fmt.Errorf("--record-labels %q: want k=v,...: %w", f.labels, err)
	}
	dss, err := client.AppsV1().DaemonSets(namespace).List(ctx, metav1.ListOptions{LabelSelector: cl.driverSelector.String()})
	if err != nil {
		return nil, fmt.Errorf("list the driver DaemonSets in %s to name the rollout record: %w", namespace, err)
	}
	var versions []string
	for _, ds := range dss.Items {
		if v := ds.Spec.Template.Annotations[cl.keys.DriverSpecVersion()]; v != "" {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		return nil, nil
	}
	name := rolloutrecord.Name(leaseName, versions)
	r := rolloutrecord.New(rolloutrecord.Config{
		Client: client, Namespace: namespace, Name: name, Versions: versionList(versions), Labels: extra,
		Keys: cl.keys, Log: log.WithField("record", namespace+"/"+name), MaxEntries: f.maxEntries, Keep: f.keep,
	})
	if err := r.Load(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func versionList(vs []string) string {
	seen, out := map[string]bool{}, ""
	for _, v := range vs {
		if !seen[v] {
			if out != "" {
				out += ","
			}
			out += v
			seen[v] = true
		}
	}
	return out
}

// finishRecord records how a run ended (its outcome, or "deadline") and
// writes the record; a run that lost its lease or failed otherwise
// records nothing: a later run goes on.
func finishRecord(ctx context.Context, r *rolloutrecord.Recorder, runErr error, final rollout.Decision, log logrus.FieldLogger) {
	if r == nil {
		return
	}
	switch {
	case runErr == nil:
		r.Outcome(string(final.Outcome))
	case errors.Is(runErr, context.DeadlineExceeded):
		r.Outcome("deadline")
	}
	// The run's ctx may be over (the deadline): the last write gets its own.
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.Flush(flushCtx); err != nil {
		log.WithError(err).Warn("cannot write the rollout record's end")
	}
}
