package health_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

// documentedMetrics are the metric names of docs/observability.md's
// "Metrics" table with the given prefix.
func documentedMetrics(t *testing.T, prefix string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("^\\| `(" + prefix + "[a-z_]+)` \\|")
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			out = append(out, m[1])
		}
	}
	if len(out) < 3 {
		t.Fatalf("docs/observability.md documents %d %s* metrics", len(out), prefix)
	}
	return out
}

// scrape returns the metric families the endpoint exposes (names of its
// # TYPE lines), nil while it does not answer.
func scrape(ctx context.Context, port int) map[string]bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	got := map[string]bool{}
	for _, l := range strings.Split(string(body), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			got[f[2]] = true
		}
	}
	return got
}

// metricsPort is the port the pod's container publishes as "metrics",
// the one the chart's PodMonitors scrape.
func metricsPort(p corev1.Pod, container string) int {
	for _, c := range p.Spec.Containers {
		if c.Name != container {
			continue
		}
		for _, port := range c.Ports {
			if port.Name == "metrics" {
				return int(port.ContainerPort)
			}
		}
	}
	return 0
}

// TestAgentsServeTheDocumentedMetrics installs the chart with both agents'
// metrics ports set, finds each port by name on the pods (as the chart's
// PodMonitors do) and scrapes it on the node: the rebooter and the
// health-watch serve every metric docs/observability.md lists for them
// once the node has probed and settled.
func TestAgentsServeTheDocumentedMetrics(t *testing.T) {
	ctx := ctxTimeout(t, 4*time.Minute)
	rebooterPort, watchPort := testbed.FreePort(t), testbed.FreePort(t)
	f := newFleet(t, fleetOptions{nodes: 1, probeInterval: 1, threshold: 3, metricsPort: watchPort,
		rebooter: map[string]any{"enabled": true, "uptimeGuardMinutes": 0, "metricsPort": rebooterPort},
		recovery: map[string]any{"autoRecover": false}})
	node := f.nodes[0]
	waitNode(ctx, t, node.Name(), "driver ready", healthy(desiredVersion))

	pods, err := env.Client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name()})
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]int{}
	for _, p := range pods.Items {
		if n := metricsPort(p, "rebooter"); n != 0 {
			ports["npu_rebooter_"] = n
		}
		if n := metricsPort(p, "watch"); n != 0 {
			ports["npu_healthwatch_"] = n
		}
	}
	if ports["npu_rebooter_"] != rebooterPort || ports["npu_healthwatch_"] != watchPort {
		t.Fatalf("metrics ports on the pods %v, want rebooter %d, health-watch %d", ports, rebooterPort, watchPort)
	}
	for prefix, port := range ports {
		want := documentedMetrics(t, prefix)
		tick := time.NewTicker(200 * time.Millisecond)
		for {
			got, missing := scrape(ctx, port), []string(nil)
			for _, m := range want {
				if !got[m] {
					missing = append(missing, m)
				}
			}
			if len(missing) == 0 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf(":%d serves %d metric families; documented and missing: %v", port, len(got), missing)
			case <-tick.C:
			}
		}
		tick.Stop()
	}
}
