package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/atomicfile"
)

// scrapeJob is the job label the chart's PodMonitor of a pod would give
// its target (<namespace>/<PodMonitor name>), "" for a pod no PodMonitor
// of the chart selects; agent says whether the PodMonitor labels the
// target with the pod's node.
func scrapeJob(p corev1.Pod, release string) (job string, agent bool) {
	switch {
	case p.Labels["app.kubernetes.io/component"] == "rebooter":
		return p.Namespace + "/" + release + "-rebooter", true
	case p.Labels["app"] == "npu-driver-daemonset":
		return p.Namespace + "/" + release + "-healthwatch", true
	case p.Labels["app.kubernetes.io/component"] == "fleet-exporter":
		return p.Namespace + "/" + release + "-fleet-exporter", false
	}
	return "", false
}

type targetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// fileSD lists the pods of ns the chart's PodMonitors would scrape, as
// Prometheus file_sd target groups: each pod's "metrics" port at its pod
// IP, labelled job, namespace, pod and, for the agents, node.
func fileSD(ctx context.Context, ns, release string) ([]targetGroup, error) {
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods in %s: %w", ns, err)
	}
	var out []targetGroup
	for _, p := range pods.Items {
		job, agent := scrapeJob(p, release)
		if job == "" || p.Status.PodIP == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Spec.Containers {
			for _, port := range c.Ports {
				if port.Name != "metrics" {
					continue
				}
				l := map[string]string{"job": job, "namespace": p.Namespace, "pod": p.Name, "container": c.Name, "endpoint": "metrics"}
				if agent {
					l["node"] = p.Spec.NodeName
				}
				out = append(out, targetGroup{Targets: []string{p.Status.PodIP + ":" + strconv.Itoa(int(port.ContainerPort))}, Labels: l})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Labels["pod"]+out[i].Labels["container"] < out[j].Labels["pod"]+out[j].Labels["container"]
	})
	return out, nil
}

// discover keeps path a file_sd file of ns's scraped pods, rewritten as
// pods come and go, until the test ends: the service discovery the
// Prometheus Operator does for PodMonitors, here from the pod list every
// second.
func discover(ctx context.Context, t *testing.T, path, ns, release string) {
	ctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	t.Cleanup(func() { cancel(); <-stopped })
	write := func() {
		groups, err := fileSD(ctx, ns, release)
		if err != nil {
			if ctx.Err() == nil {
				t.Logf("service discovery: %v", err)
			}
			return
		}
		b, err := json.Marshal(groups)
		if err != nil {
			t.Errorf("service discovery: %v", err)
			return
		}
		if old, err := os.ReadFile(path); err == nil && string(old) == string(b) {
			return
		}
		if err := atomicfile.Write(path, b, 0o644); err != nil {
			t.Errorf("service discovery: %v", err)
		}
	}
	write()
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				write()
			}
		}
	}()
}
