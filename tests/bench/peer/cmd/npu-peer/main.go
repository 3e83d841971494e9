// npu-peer runs NVIDIA's driver upgrade library (k8s-operator-libs
// pkg/upgrade) as GPU Operator's upgrade controller runs it, against the
// cluster of --kubeconfig, until it is stopped: the peer `make bench`
// measures npu-stack's rollout against. One JSON line per reconcile goes
// to stdout; the library's and controller-runtime's logs to stderr.
package main

import (
	"flag"
	"fmt"
	"os"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/openfuyao/npu-stack/tests/bench/peer/runner"
)

func main() {
	var cfg runner.Config
	flag.StringVar(&cfg.Namespace, "namespace", "", "the operator's namespace: driver DaemonSets, its Lease and cache")
	driver := flag.String("driver-labels", runner.DefaultDriverLabels, "labels of the driver DaemonSets and pods")
	flag.StringVar(&cfg.ValidatorSelector, "validator-selector", runner.DefaultValidatorSelector, "selector of the validator pods")
	flag.StringVar(&cfg.DriverName, "driver-name", runner.DefaultDriverName, "the library's driver name (its label keys)")
	flag.IntVar(&cfg.MaxParallelUpgrades, "max-parallel-upgrades", runner.DefaultMaxParallelUpgrades, "maxParallelUpgrades (0 = unlimited)")
	flag.StringVar(&cfg.MaxUnavailable, "max-unavailable", runner.DefaultMaxUnavailable, "maxUnavailable, a number or a percentage")
	flag.Float64Var(&cfg.TimeScale, "time-scale", 1, "the fleet's time scale (1 = real time, 0.0333 = 1:30): the planned requeue, retry bounds and policy timeouts are multiplied by it")
	// GPU Operator's logging: zap, production settings, stack traces only on panics.
	opts := zap.Options{StacktraceLevel: zapcore.PanicLevel}
	opts.BindFlags(flag.CommandLine)
	flag.Parse() // also --kubeconfig, registered by controller-runtime
	set, err := labels.ConvertSelectorToLabelsMap(*driver)
	if err != nil || cfg.Namespace == "" {
		fmt.Fprintf(os.Stderr, "npu-peer: --namespace is required and --driver-labels must be k=v[,k=v] (%v)\n", err)
		os.Exit(2)
	}
	cfg.DriverLabels = set
	cfg.Log = zap.New(zap.UseFlagOptions(&opts))
	ctrl.SetLogger(cfg.Log)
	cfg.Trace = os.Stdout
	rc, err := ctrl.GetConfig()
	if err == nil {
		err = runner.Run(ctrl.SetupSignalHandler(), rc, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "npu-peer:", err)
		os.Exit(1)
	}
}
