// Command npu-inhibit-check reads an Alertmanager configuration with
// Alertmanager's own config package (v0.35.0: the parser and validation
// `alertmanager` and `amtool check-config` use) and says, for each target
// alert of a JSON file, which of its inhibit rules would mute it given the
// source alerts firing: source matched by the rule's source matchers
// (built by inhibit.NewInhibitRule, as the Alertmanager builds them),
// target by its target matchers, the rule's equal labels equal on both
// (a label absent from both counts as equal, as in Alertmanager), and a
// source that matches the target side too not muting itself.
//
// usage: npu-inhibit-check CONFIG ALERTS.json
// ALERTS.json: {"sources": [{label: value}], "targets": [{label: value}]}
// output: one JSON line per target: {"labels": {...}, "mutedBy": ["rule #0"]}
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/prometheus/alertmanager/config"
	"github.com/prometheus/alertmanager/inhibit"
	"github.com/prometheus/common/model"
)

type alerts struct {
	Sources []model.LabelSet `json:"sources"`
	Targets []model.LabelSet `json:"targets"`
}

type verdict struct {
	Labels  model.LabelSet `json:"labels"`
	MutedBy []string       `json:"mutedBy"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "npu-inhibit-check: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 3 {
		return fmt.Errorf("usage: npu-inhibit-check CONFIG ALERTS.json")
	}
	cfg, err := config.LoadFile(os.Args[1])
	if err != nil {
		return fmt.Errorf("load %s: %w", os.Args[1], err)
	}
	b, err := os.ReadFile(os.Args[2])
	if err != nil {
		return err
	}
	var in alerts
	if err := json.Unmarshal(b, &in); err != nil {
		return fmt.Errorf("%s: %w", os.Args[2], err)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, t := range in.Targets {
		v := verdict{Labels: t, MutedBy: []string{}}
		for i, cr := range cfg.InhibitRules {
			r := inhibit.NewInhibitRule(cr)
			if !r.TargetMatchers.Matches(t) {
				continue
			}
			for _, s := range in.Sources {
				if !r.SourceMatchers.Matches(s) || r.TargetMatchers.Matches(s) && s.Equal(t) {
					continue
				}
				equal := true
				for ln := range r.Equal {
					if s[ln] != t[ln] {
						equal = false
						break
					}
				}
				if equal {
					name := cr.Name
					if name == "" {
						name = fmt.Sprintf("rule #%d", i)
					}
					v.MutedBy = append(v.MutedBy, name)
					break
				}
			}
		}
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return nil
}
