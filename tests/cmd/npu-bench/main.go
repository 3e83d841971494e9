// npu-bench is `make bench`: driver rollouts of simulated NPU fleets (10 to
// 10,000 nodes) on a local control plane, npu-stack's and NVIDIA's upgrade
// library's on one clock, measured against the targets the report states.
// It writes results.md and results.json to --out and exits non-zero only
// when something is broken, never because a figure missed its target.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"

	"github.com/openfuyao/npu-stack/tests/bench/report"
	"github.com/openfuyao/npu-stack/tests/bench/suite"
	"github.com/openfuyao/npu-stack/tests/bench/watchcost"
)

func main() {
	mode := flag.String("mode", envOr("BENCH", "full"), "quick (N = 100, for CI), realistic (N = 10, 300 s per node in real time, both sides at once) or full (N = 100 to 10,000, scaled 1:30)")
	out := flag.String("out", ".cache/bench", "directory for results.md, results.json and logs")
	var extra stringList
	flag.Var(&extra, "rollout-arg", "extra argument of every `npu-hooks rollout` (repeatable), to try a setting before changing its default")
	debug := flag.Bool("debug", false, "log the simulated nodes' steps (kubelet restarts, retried failures) too")
	keep := flag.Bool("keep-controlplane", false, "keep each control plane's directory (component logs, KWOK's among them) under --out")
	var only intList
	flag.Var(&only, "nodes", "run only the fleets of these sizes of the mode (comma-separated, e.g. 5000; in quick mode one size of any value, e.g. 20); results.json then holds only them")
	var watchSizes, watchOld intList
	flag.Var(&watchSizes, "watch-cost", "instead of rollouts, measure the node agents' watches on an idle fleet of these sizes (comma-separated, e.g. 1000,10000): N real rebooters with --auto-recover; results in --out/watch.{md,json}")
	flag.Var(&watchOld, "watch-cost-old", "with --watch-cost, also measure at these sizes the storm protection's old watch of every NPU node")
	watchWindow := flag.Duration("watch-window", 3*time.Minute, "with --watch-cost, each measurement window")
	statusEvery := flag.Duration("status-every", watchcost.DefaultStatusEvery, "with --watch-cost, each idle node's status report period (the kubelet's nodeStatusReportFrequency)")
	render := flag.String("render", "", "only re-render results.md (with the targets re-evaluated) from this results.json, into --out; several, comma-separated, make one table of runs of different -nodes")
	flag.Parse()
	if *render != "" {
		r, err := suite.Rerender(strings.Split(*render, ","), *out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "npu-bench:", err)
			os.Exit(1)
		}
		fmt.Print(report.Markdown(r))
		return
	}
	log := logrus.New()
	log.SetOutput(os.Stderr)
	if *debug {
		log.SetLevel(logrus.DebugLevel)
	}
	if len(watchSizes) > 0 || len(watchOld) > 0 {
		// Thousands of in-process agents' client-go warnings (watches
		// restarted under load) go to a file, not the terminal.
		if err := klogTo(filepath.Join(*out, "client-go.log")); err != nil {
			fmt.Fprintln(os.Stderr, "npu-bench:", err)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		r, err := suite.RunWatchCost(ctx, suite.WatchConfig{Sizes: watchSizes, OldSizes: watchOld, Window: *watchWindow, StatusEvery: *statusEvery, OutDir: *out, Log: log})
		if err != nil {
			fmt.Fprintln(os.Stderr, "npu-bench: broken function:", err)
			os.Exit(1)
		}
		fmt.Print(watchcost.Markdown(r))
		return
	}
	plan, err := suite.PlanFor(*mode)
	if err == nil {
		plan, err = plan.Only(only)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "npu-bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := suite.Run(ctx, suite.Config{Plan: plan, OutDir: *out, Log: log, RolloutArgs: extra, KeepControlPlane: *keep})
	if err != nil {
		fmt.Fprintln(os.Stderr, "npu-bench: broken function:", err)
		os.Exit(1)
	}
	fmt.Print(report.Markdown(r))
	fmt.Fprintf(os.Stderr, "\nresults: %s/results.md, %s/results.json\n", *out, *out)
}

// klogTo sends client-go's klog output to path.
func klogTo(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("client-go log: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("client-go log: %w", err)
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		if err := fs.Set(k, v); err != nil {
			return fmt.Errorf("client-go log: %w", err)
		}
	}
	klog.SetOutput(f)
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

type intList []int

func (l *intList) String() string { return fmt.Sprint(*l) }

func (l *intList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("%q is not a node count", f)
		}
		*l = append(*l, n)
	}
	return nil
}

type stringList []string

func (l *stringList) String() string { return fmt.Sprint(*l) }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}
