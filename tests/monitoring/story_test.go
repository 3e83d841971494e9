package monitoring_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/fleetmetrics"
	"github.com/openfuyao/npu-stack/tests/dashboard"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

var keys = contract.Keys{Domain: contract.DefaultDomain}

const (
	release     = "npu-stack"
	oldVersion  = "1.0.0"
	newVersion  = "2.0.0"
	fleetLabel  = "npu-stack.test/monitoring"
	approvalFor = "20s"
	// rebootDowntime is how long each simulated reboot keeps its node
	// down (a real one takes minutes).
	rebootDowntime = 10 * time.Second
)

// story is one manual upgrade watched by a real Prometheus.
type story struct {
	t     *testing.T
	ns    string
	vals  map[string]any
	nodes []string
	prom  *testbed.Prometheus
	start time.Time

	mu   sync.Mutex
	seen map[string]map[string]bool // alertname/node → states seen
}

// TestPrometheusAlertsOnAManualUpgrade installs the chart on two process
// NPU nodes and a CPU node (every node's pods on an address of their
// own, so each agent serves its metrics port), points a real Prometheus
// at the agents and the fleet exporter and loads the chart's alert rules
// rendered with a short approval wait, and upgrades the driver in manual
// mode through the real hook Job: NPUNodeAwaitingRebootApproval fires
// while a node waits for its approval and resolves once it is approved;
// NPUStackPlannedReboot fires for each node while it reboots on purpose
// (each reboot keeps its node down rebootDowntime, five scrapes); every
// query of the chart's dashboard returns series over the run; and
// `npu-hooks timeline` draws the rollout. About 70 s, 2 min with the
// package's control plane.
func TestPrometheusAlertsOnAManualUpgrade(t *testing.T) {
	ctx := ctxTimeout(t, 25*time.Minute)
	s := &story{t: t, seen: map[string]map[string]bool{}}
	s.setUp(ctx)

	upErr := make(chan error, 1)
	go func() {
		s.vals["driver"].(map[string]any)["version"] = newVersion
		_, err := env.Helm(s.ns).Upgrade(ctx, release, s.vals, testbed.InstallOptions{Timeout: 15 * time.Minute})
		upErr <- err
	}()
	waiting := s.waitNode(ctx, "a node waits for its upgrade reboot's approval", func(n *corev1.Node) bool {
		return n.Labels[keys.UpgradeState()] == string(contract.StateRebootRequired) && n.Labels[keys.RebootRequired()] == contract.True
	})
	firedAt := s.waitAlert(ctx, "NPUNodeAwaitingRebootApproval", waiting, "firing")
	t.Logf("NPUNodeAwaitingRebootApproval fired for %s %s after the upgrade began", waiting, firedAt.Sub(s.start).Round(time.Second))
	if s.saw("NPUStackPlannedReboot", waiting, "firing") {
		t.Errorf("NPUStackPlannedReboot fired for %s before its reboot was approved", waiting)
	}

	for _, n := range s.nodes {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, keys.ApproveReboot())
		if _, err := env.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	approved := time.Now()
	resolvedAt := s.waitAlertGone(ctx, "NPUNodeAwaitingRebootApproval")
	t.Logf("NPUNodeAwaitingRebootApproval resolved %s after the approvals", resolvedAt.Sub(approved).Round(time.Second))

	if err := <-upErr; err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	for _, n := range s.nodes {
		s.waitNodeNamed(ctx, n, "on driver "+newVersion, func(node *corev1.Node) bool {
			return node.Labels[keys.DriverVersion()] == newVersion && node.Labels[keys.UpgradeState()] == ""
		})
		if !s.saw("NPUStackPlannedReboot", n, "firing") {
			t.Errorf("NPUStackPlannedReboot never fired for %s, which rebooted on purpose; alerts seen: %v", n, s.seenAlerts())
		}
	}
	t.Logf("alerts seen during the story (name/node=state): %v", s.seenAlerts())
	s.checkFleetSeries(ctx)
	s.checkDashboard(ctx)
	s.checkTimeline(ctx)
}

// checkTimeline draws the rollout's record with `npu-hooks timeline`: a
// row for each node, each approved and rebooted once, the run finished.
func (s *story) checkTimeline(ctx context.Context) {
	out := filepath.Join(s.t.TempDir(), "timeline.svg")
	cmd := exec.CommandContext(ctx, filepath.Join(env.ProductBinDir, "npu-hooks"), "timeline", "--namespace", s.ns, "-o", out)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	msg, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("npu-hooks timeline: %v\n%s", err, msg)
	}
	s.t.Logf("%s", msg)
	b, err := os.ReadFile(out)
	if err != nil {
		s.t.Fatal(err)
	}
	svg := string(b)
	for _, n := range s.nodes {
		for _, want := range []string{">" + n + "</text>", n + ": reboot approved", n + ": new boot", n + ": reboot-required for"} {
			if !strings.Contains(svg, want) {
				s.t.Errorf("the timeline lacks %q", want)
			}
		}
	}
	if !strings.Contains(svg, "run finished") {
		s.t.Error("the timeline does not show the run finished")
	}
}

// setUp starts the nodes, Prometheus and the service discovery, and
// installs the chart at oldVersion.
func (s *story) setUp(ctx context.Context) {
	t := s.t
	ns, err := env.NewNamespace(ctx, "monitoring")
	if err != nil {
		t.Fatal(err)
	}
	s.ns = ns
	npu, err := env.AddProcessNodes(ctx, 2, testbed.NodeSpec{Prefix: "mon", Labels: map[string]string{fleetLabel: ns}, Driver: oldVersion, PodIPs: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range npu {
		s.nodes = append(s.nodes, n.Name())
		// Down for five scrapes: the fleet exporter's view of a planned
		// reboot, and the agents' targets going down, are sampled.
		n.SetRebootDowntime(rebootDowntime)
	}
	if _, err := env.AddProcessNodes(ctx, 1, testbed.NodeSpec{Prefix: "mon-cpu", CPU: true, PodIPs: true}); err != nil {
		t.Fatal(err)
	}
	s.vals = map[string]any{
		"namespace":       ns,
		"npuNodeSelector": map[string]any{contract.LabelNPUPresent: "true", fleetLabel: ns},
		"driver": map[string]any{"version": oldVersion, "upgradePolicy": map[string]any{
			"autoUpgrade": false, "maxParallelUpgrades": 2, "maxUnavailable": "100%", "rebootTimeoutSeconds": 300}},
		"rebooter":      map[string]any{"uptimeGuardMinutes": 0, "slots": 2, "metricsPort": testbed.FreePort(t)},
		"healthWatch":   map[string]any{"probeIntervalSeconds": 2, "probeTimeoutSeconds": 2, "metricsPort": testbed.FreePort(t)},
		"fleetExporter": map[string]any{"port": testbed.FreePort(t)},
		"hooks":         map[string]any{"resume": map[string]any{"enabled": false}, "preflight": map[string]any{"enabled": false}, "activeDeadlineSeconds": 1200},
	}
	dir := t.TempDir()
	s.writeRules(ctx, filepath.Join(dir, "rules.yaml"))
	discover(ctx, t, filepath.Join(dir, "targets.json"), ns, release)
	cfg := `global: {scrape_interval: 2s, scrape_timeout: 1s, evaluation_interval: 2s}
rule_files: [rules.yaml]
scrape_configs:
  - job_name: npu-stack-pods
    file_sd_configs: [{files: [targets.json], refresh_interval: 2s}]
`
	if s.prom, err = testbed.StartPrometheus(ctx, dir, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.prom.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(s.prom.Log()); err == nil {
				t.Logf("prometheus log:\n%s", b)
			}
		}
	})
	s.start = time.Now()
	if _, err := env.Helm(ns).Install(ctx, release, s.vals, testbed.InstallOptions{Timeout: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Helm(ns).Uninstall(release) })
	for _, n := range s.nodes {
		s.waitNodeNamed(ctx, n, "driver "+oldVersion+" ready", func(node *corev1.Node) bool {
			return node.Labels[keys.DriverVersion()] == oldVersion && node.Labels[keys.DriverReady()] == contract.True
		})
	}
	// 2 rebooters, 2 health-watches, 1 fleet exporter.
	s.waitTargetsUp(ctx, 5)
	go s.watchAlerts(ctx)
}

// writeRules renders the chart's PrometheusRule with the story's values
// and a short approval wait, and writes its groups as a rule file.
func (s *story) writeRules(ctx context.Context, path string) {
	vals := map[string]any{}
	for k, v := range s.vals {
		vals[k] = v
	}
	vals["prometheusRule"] = map[string]any{"enabled": true, "renderWithoutAPI": true, "for": map[string]any{
		"awaitingApproval": approvalFor, "upgradeStuck": "1m", "rebootTooLong": "1m", "upgradeFailed": "1m", "driverInstallFailed": "15m",
		"rolloutJobFailed": "1m", "rebootRefused": "5m", "chipUnhealthy": "5m", "chipsWedged": "10m", "npuSmiCannotRun": "10m", "targetDown": "10m"}}
	rel, err := env.Helm(s.ns).Render(ctx, release, vals)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, doc := range strings.Split(rel.Manifest, "\n---") {
		var o struct {
			Kind string         `json:"kind"`
			Spec map[string]any `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			s.t.Fatal(err)
		}
		if o.Kind != "PrometheusRule" {
			continue
		}
		b, err := yaml.Marshal(o.Spec)
		if err != nil {
			s.t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			s.t.Fatal(err)
		}
		return
	}
	s.t.Fatal("the chart rendered no PrometheusRule")
}

// watchAlerts records every active alert's state, by name and node, once
// a second until ctx ends: what the story asserts on afterwards.
func (s *story) watchAlerts(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if alerts, err := s.prom.Alerts(ctx); err == nil {
			s.mu.Lock()
			for _, a := range alerts {
				k := a.Labels["alertname"] + "/" + a.Labels["node"]
				if s.seen[k] == nil {
					s.seen[k] = map[string]bool{}
				}
				s.seen[k][a.State] = true
			}
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *story) saw(alert, node, state string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[alert+"/"+node][state]
}

func (s *story) seenAlerts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, states := range s.seen {
		for st := range states {
			out = append(out, k+"="+st)
		}
	}
	sort.Strings(out)
	return out
}

// poll calls f every second until it returns true or ctx ends.
func poll(ctx context.Context, f func() bool) bool {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if f() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// waitAlert waits until Prometheus has alert in state for node.
func (s *story) waitAlert(ctx context.Context, alert, node, state string) time.Time {
	var last []testbed.Alert
	if !poll(ctx, func() bool {
		as, err := s.prom.Alerts(ctx)
		if err != nil {
			return false
		}
		last = as
		for _, a := range as {
			if a.Labels["alertname"] == alert && a.Labels["node"] == node && a.State == state {
				return true
			}
		}
		return false
	}) {
		s.t.Fatalf("%s never %s for %s; active alerts: %v", alert, state, node, last)
	}
	return time.Now()
}

// waitAlertGone waits until no alert named alert is active (pending or
// firing).
func (s *story) waitAlertGone(ctx context.Context, alert string) time.Time {
	var last []testbed.Alert
	if !poll(ctx, func() bool {
		as, err := s.prom.Alerts(ctx)
		if err != nil {
			return false
		}
		last = as
		for _, a := range as {
			if a.Labels["alertname"] == alert {
				return false
			}
		}
		return true
	}) {
		s.t.Fatalf("%s still active after the approvals: %v", alert, last)
	}
	return time.Now()
}

// waitTargetsUp waits until n targets are up.
func (s *story) waitTargetsUp(ctx context.Context, n int) {
	var last []map[string]string
	if !poll(ctx, func() bool {
		ts, err := s.prom.Targets(ctx)
		if err != nil {
			return false
		}
		last = ts
		up := 0
		for _, tg := range ts {
			if tg["health"] == "up" {
				up++
			}
		}
		return up >= n
	}) {
		s.t.Fatalf("fewer than %d scrape targets up: %v", n, last)
	}
}

func (s *story) waitNode(ctx context.Context, what string, cond func(*corev1.Node) bool) string {
	var name string
	err := testbed.WaitFor(ctx, cache.NewFilteredListWatchFromClient(env.Client.CoreV1().RESTClient(), "nodes", "", func(o *metav1.ListOptions) {
		o.LabelSelector = fleetLabel + "=" + s.ns
	}), &corev1.Node{}, func(nodes []*corev1.Node) (bool, error) {
		for _, n := range nodes {
			if cond(n) {
				name = n.Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		s.t.Fatalf("waiting until %s: %v", what, err)
	}
	return name
}

func (s *story) waitNodeNamed(ctx context.Context, name, what string, cond func(*corev1.Node) bool) {
	err := testbed.WaitFor(ctx, cache.NewFilteredListWatchFromClient(env.Client.CoreV1().RESTClient(), "nodes", "", func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + name
	}), &corev1.Node{}, func(nodes []*corev1.Node) (bool, error) { return len(nodes) == 1 && cond(nodes[0]), nil })
	if err != nil {
		s.t.Fatalf("%s: waiting for %s: %v", name, what, err)
	}
}

// checkFleetSeries: Prometheus holds every series the fleet exporter
// declares (docs/observability.md lists the same) that this story
// exercises, as scraped through the exporter's target.
func (s *story) checkFleetSeries(ctx context.Context) {
	res, err := s.prom.QueryRange(ctx, `count by (__name__) ({__name__=~"npu_fleet_.+"})`, s.start, time.Now(), 5*time.Second)
	if err != nil {
		s.t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range res {
		got[r.Metric["__name__"]] = true
	}
	// A manual upgrade without failures shows every series but these.
	notInThisStory := map[string]bool{fleetmetrics.MetricNodeUpgradeFailed: true}
	for _, d := range fleetmetrics.Metrics() {
		if !got[d.Name] && !notInThisStory[d.Name] {
			s.t.Errorf("Prometheus never got %s from the fleet exporter during the story", d.Name)
		}
	}
}

// checkDashboard runs every panel query of the chart's dashboard over the
// story (Grafana's $__rate_interval as 20s: eight or more 2s scrapes) and
// requires each to return series.
func (s *story) checkDashboard(ctx context.Context) {
	root, err := testbed.RepoRoot()
	if err != nil {
		s.t.Fatal(err)
	}
	d, err := dashboard.Load(root)
	if err != nil {
		s.t.Fatal(err)
	}
	qs, err := d.Queries()
	if err != nil {
		s.t.Fatal(err)
	}
	end := time.Now()
	for _, q := range qs {
		res, err := s.prom.QueryRange(ctx, q.PromQL("20s", "10m"), s.start, end, 5*time.Second)
		if err != nil {
			s.t.Errorf("dashboard panel %q query %s: %v", q.Panel, q.RefID, err)
			continue
		}
		if len(res) == 0 {
			s.t.Errorf("dashboard panel %q query %s returned no series over the story: %s", q.Panel, q.RefID, q.Expr)
			continue
		}
		s.t.Logf("dashboard panel %q %s: %d series", q.Panel, q.RefID, len(res))
	}
}
