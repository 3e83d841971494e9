package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Prometheus is a real Prometheus (ci/engines/prometheus, built from
// github.com/prometheus/prometheus) on loopback, for the tests of the
// chart's alerts and dashboard: it scrapes what its configuration names
// (file_sd targets the test writes, as the Prometheus Operator's
// PodMonitors would find them) and evaluates the rule files it names.
type Prometheus struct {
	// URL is its HTTP API, http://127.0.0.1:PORT.
	URL  string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// StartPrometheus starts Prometheus with config (prometheus.yml text) in
// dir (its TSDB, config and log live there) and waits until it is ready.
func StartPrometheus(ctx context.Context, dir, config string) (*Prometheus, error) {
	bin, err := Engine("prometheus/prometheus")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return nil, fmt.Errorf("write the Prometheus config: %w", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pick a port for Prometheus: %w", err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // Prometheus binds it next; nothing else here races for it
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start Prometheus: %w", err)
	}
	p := &Prometheus{URL: "http://" + addr, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(p.done) }()
	if err := p.waitReady(ctx); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

func (p *Prometheus) waitReady(ctx context.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/-/ready", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("Prometheus exited before it was ready; its log: %s", p.log)
		case <-ctx.Done():
			return fmt.Errorf("Prometheus not ready (log %s): %w", p.log, ctx.Err())
		case <-tick.C:
		}
	}
}

// Log is the path of Prometheus' log.
func (p *Prometheus) Log() string { return p.log }

// Stop ends Prometheus.
func (p *Prometheus) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Series is one series of a query's result.
type Series struct {
	Metric map[string]string `json:"metric"`
	// Value is an instant query's [time, "value"]; Values a range query's.
	Value  []any   `json:"value"`
	Values [][]any `json:"values"`
}

// Alert is one active alert (pending or firing).
type Alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

func (p *Prometheus) api(ctx context.Context, path string, params url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+path+"?"+params.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("Prometheus %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("Prometheus %s: %s: %w", path, b, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("Prometheus %s %v: %s", path, params, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}

// Query runs an instant query now.
func (p *Prometheus) Query(ctx context.Context, q string) ([]Series, error) {
	var d struct {
		ResultType string   `json:"resultType"`
		Result     []Series `json:"result"`
	}
	if err := p.api(ctx, "/api/v1/query", url.Values{"query": {q}}, &d); err != nil {
		return nil, err
	}
	if d.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: result type %s, want vector", q, d.ResultType)
	}
	return d.Result, nil
}

// QueryRange runs q over [start, end] every step.
func (p *Prometheus) QueryRange(ctx context.Context, q string, start, end time.Time, step time.Duration) ([]Series, error) {
	var d struct {
		Result []Series `json:"result"`
	}
	params := url.Values{"query": {q}, "start": {unix(start)}, "end": {unix(end)}, "step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}
	if err := p.api(ctx, "/api/v1/query_range", params, &d); err != nil {
		return nil, err
	}
	return d.Result, nil
}

// Alerts are the active alerts (pending and firing) of the rules.
func (p *Prometheus) Alerts(ctx context.Context) ([]Alert, error) {
	var d struct {
		Alerts []Alert `json:"alerts"`
	}
	if err := p.api(ctx, "/api/v1/alerts", nil, &d); err != nil {
		return nil, err
	}
	return d.Alerts, nil
}

// Targets are the scrape targets' labels and health ("up", "down", "unknown").
func (p *Prometheus) Targets(ctx context.Context) ([]map[string]string, error) {
	var d struct {
		ActiveTargets []struct {
			Labels map[string]string `json:"labels"`
			Health string            `json:"health"`
		} `json:"activeTargets"`
	}
	if err := p.api(ctx, "/api/v1/targets", url.Values{"state": {"active"}}, &d); err != nil {
		return nil, err
	}
	out := make([]map[string]string, 0, len(d.ActiveTargets))
	for _, t := range d.ActiveTargets {
		l := map[string]string{"health": t.Health}
		for k, v := range t.Labels {
			l[k] = v
		}
		out = append(out, l)
	}
	return out, nil
}

func unix(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}
