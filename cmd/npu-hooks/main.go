// Command npu-hooks runs the driver rollout: preflight (pre-install and
// pre-upgrade hook), rollout (post-install/upgrade/rollback hook, job mode
// and resume CronJob), plan and status for people, and uninstall (by hand
// after helm uninstall, or the pre-delete hook).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	// The zone database in the binary: maintenance windows name IANA
	// zones, and the static images have no /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/openfuyao/npu-stack/internal/cli"
	"github.com/openfuyao/npu-stack/internal/hookcli"
)

func main() {
	var opts cli.GlobalOptions
	root := cli.NewRoot("npu-hooks", "Driver rollout hooks: preflight, rollout, plan, status, uninstall, the fleet exporter and the rollout timeline", &opts)
	root.AddCommand(hookcli.NewPreflight(&opts), hookcli.NewRollout(&opts), hookcli.NewPlan(&opts), hookcli.NewStatus(&opts), hookcli.NewUninstall(&opts), hookcli.NewExporter(&opts), hookcli.NewTimeline(&opts))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "npu-hooks: %v\n", err)
		os.Exit(cli.ExitCode(err))
	}
}
