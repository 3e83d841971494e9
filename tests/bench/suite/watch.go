package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/openfuyao/npu-stack/tests/bench/watchcost"
	"github.com/openfuyao/npu-stack/tests/testbed"
)

// WatchConfig is the watch-cost measurement (npu-bench --watch-cost).
type WatchConfig struct {
	// Sizes are the fleet sizes; the agents as they are run at each.
	Sizes []int
	// OldSizes also run the storm protection's old watch of every NPU
	// node (on the same fleet, before the agents as they are).
	OldSizes    []int
	Window      time.Duration
	StatusEvery time.Duration
	OutDir      string
	Log         logrus.FieldLogger
}

// RunWatchCost measures each size on a control plane of its own and
// writes watch.md and watch.json to OutDir (after every size, so that a
// stopped run keeps what it measured).
func RunWatchCost(ctx context.Context, cfg WatchConfig) (watchcost.Report, error) {
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return watchcost.Report{}, fmt.Errorf("output dir %s: %w", cfg.OutDir, err)
	}
	commit, err := commitOf(ctx)
	if err != nil {
		return watchcost.Report{}, err
	}
	r := watchcost.Report{Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Commit: commit, Machine: machine()}
	sizes := slices.Sorted(slices.Values(slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(cfg.Sizes), cfg.OldSizes...))))))
	for _, n := range sizes {
		var variants []watchcost.Variant
		if slices.Contains(cfg.OldSizes, n) {
			variants = append(variants, watchcost.AllNodes)
		}
		if slices.Contains(cfg.Sizes, n) {
			variants = append(variants, watchcost.Requests)
		}
		s, err := watchSize(ctx, cfg, n, variants)
		r.Sizes = append(r.Sizes, s)
		r.Targets = watchcost.Targets(r)
		if werr := writeWatch(cfg.OutDir, r); werr != nil {
			return r, werr
		}
		if err != nil {
			return r, err
		}
	}
	return r, nil
}

func watchSize(ctx context.Context, cfg WatchConfig, n int, variants []watchcost.Variant) (watchcost.Size, error) {
	log := cfg.Log.WithField("nodes", n)
	beat, grace := heartbeat(n)
	log.Info("starting a control plane")
	env, err := testbed.NewEnv(ctx, testbed.Options{NodeMonitorGracePeriod: grace})
	if err != nil {
		return watchcost.Size{Nodes: n}, fmt.Errorf("test bed for %d nodes: %w", n, err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			log.WithError(err).Warn("stop the control plane")
		}
	}()
	s, err := watchcost.Run(ctx, watchcost.Config{Env: env, Nodes: n, Variants: variants, Window: cfg.Window,
		StatusEvery: cfg.StatusEvery, LeaseEvery: beat, Log: log})
	if err != nil {
		return s, fmt.Errorf("watch cost at N = %d: %w", n, err)
	}
	return s, nil
}

func writeWatch(dir string, r watchcost.Report) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the watch-cost results: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "watch.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("write watch.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "watch.md"), []byte(watchcost.Markdown(r)), 0o644); err != nil {
		return fmt.Errorf("write watch.md: %w", err)
	}
	return nil
}
