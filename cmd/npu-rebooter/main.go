// Command npu-rebooter: Per-node agent that executes approved reboots of NPU nodes.
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

	"github.com/openfuyao/npu-stack/internal/rebootercli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := rebootercli.NewRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", rebootercli.Name, err)
		os.Exit(1)
	}
}
