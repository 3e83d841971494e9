// Package dashboard reads the chart's Grafana dashboard
// (charts/npu-stack/files/dashboards) for the tests: its panels and their
// PromQL, with Grafana's interval variables made concrete so Prometheus
// and promtool can parse and run them.
package dashboard

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// File is the dashboard's path under the repository root.
const File = "charts/npu-stack/files/dashboards/npu-stack-fleet.json"

// Query is one panel target.
type Query struct {
	Panel string // the panel's title
	RefID string
	Expr  string // as written, with Grafana's variables
}

// PromQL is the query with Grafana's interval variables replaced by
// values a Prometheus accepts: $__rate_interval and $__interval by
// interval, $__range by rng.
func (q Query) PromQL(interval, rng string) string {
	return strings.NewReplacer("$__rate_interval", interval, "${__rate_interval}", interval,
		"$__interval", interval, "${__interval}", interval, "$__range", rng, "${__range}", rng).Replace(q.Expr)
}

type panel struct {
	Title      string  `json:"title"`
	Type       string  `json:"type"`
	Panels     []panel `json:"panels"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
}

// Dashboard is the parsed JSON.
type Dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

// Load reads the dashboard under root.
func Load(root string) (Dashboard, error) {
	b, err := os.ReadFile(filepath.Join(root, File))
	if err != nil {
		return Dashboard{}, err
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("%s: %w", File, err)
	}
	return d, nil
}

// Titles are the titles of every panel but rows.
func (d Dashboard) Titles() []string {
	var out []string
	d.walk(func(p panel) {
		if p.Type != "row" {
			out = append(out, p.Title)
		}
	})
	return out
}

// Queries are every panel target's query, in panel order. A panel or
// target whose datasource is not the dashboard's ${datasource} variable
// is an error: the dashboard must follow the Prometheus it is imported
// against.
func (d Dashboard) Queries() ([]Query, error) {
	var out []Query
	var errs []string
	d.walk(func(p panel) {
		if p.Type == "row" {
			return
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			errs = append(errs, fmt.Sprintf("panel %q: datasource is not ${datasource}", p.Title))
		}
		if len(p.Targets) == 0 {
			errs = append(errs, fmt.Sprintf("panel %q has no query", p.Title))
		}
		for _, t := range p.Targets {
			if t.Datasource == nil || t.Datasource.UID != "${datasource}" {
				errs = append(errs, fmt.Sprintf("panel %q target %s: datasource is not ${datasource}", p.Title, t.RefID))
			}
			out = append(out, Query{Panel: p.Title, RefID: t.RefID, Expr: t.Expr})
		}
	})
	if len(errs) > 0 {
		return out, fmt.Errorf("%s: %s", File, strings.Join(errs, "; "))
	}
	return out, nil
}

func (d Dashboard) walk(f func(panel)) {
	var rec func([]panel)
	rec = func(ps []panel) {
		for _, p := range ps {
			f(p)
			rec(p.Panels)
		}
	}
	rec(d.Panels)
}
