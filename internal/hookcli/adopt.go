package hookcli

import (
	"context"
	"fmt"
	"sort"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Labels of the chart's rollout Job (hook or job mode) and resume CronJob.
const (
	rolloutJobSelector  = "app.kubernetes.io/component=rollout"
	rolloutCronSelector = "app.kubernetes.io/component=rollout-resume"
)

// chartRolloutArgs returns the arguments the chart gave the newest rollout
// Job (or the resume CronJob) in namespace, nil if there is none. status
// and plan adopt them, so that why a node waits is told with the policy
// actually in force, not with flag defaults.
func chartRolloutArgs(ctx context.Context, client kubernetes.Interface, namespace string) ([]string, string, error) {
	jobs, err := client.BatchV1().Jobs(namespace).List(ctx, metav1.ListOptions{LabelSelector: rolloutJobSelector})
	if err != nil {
		return nil, "", fmt.Errorf("list rollout Jobs in %s: %w", namespace, err)
	}
	if n := len(jobs.Items); n > 0 {
		sort.Slice(jobs.Items, func(i, j int) bool {
			return jobs.Items[i].CreationTimestamp.Before(&jobs.Items[j].CreationTimestamp)
		})
		j := jobs.Items[n-1]
		if cs := j.Spec.Template.Spec.Containers; len(cs) > 0 {
			return cs[0].Args, "Job " + namespace + "/" + j.Name, nil
		}
	}
	crons, err := client.BatchV1().CronJobs(namespace).List(ctx, metav1.ListOptions{LabelSelector: rolloutCronSelector})
	if err != nil {
		return nil, "", fmt.Errorf("list rollout CronJobs in %s: %w", namespace, err)
	}
	for _, c := range crons.Items {
		if cs := c.Spec.JobTemplate.Spec.Template.Spec.Containers; len(cs) > 0 {
			return cs[0].Args, "CronJob " + namespace + "/" + c.Name, nil
		}
	}
	return nil, "", nil
}

// adopt parses args ("rollout --flag=value ...") into the flags of fs the
// user did not set; flags the rollout has and fs lacks are ignored.
func adopt(fs *pflag.FlagSet, args []string) error {
	tmp := pflag.NewFlagSet("rollout", pflag.ContinueOnError)
	tmp.ParseErrorsAllowlist.UnknownFlags = true
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Changed && f.Name != "kubeconfig" && f.Name != "namespace" {
			tmp.AddFlag(f)
		}
	})
	if len(args) > 0 && args[0] == "rollout" {
		args = args[1:]
	}
	if err := tmp.Parse(args); err != nil {
		return fmt.Errorf("read the chart's rollout arguments: %w", err)
	}
	return nil
}
