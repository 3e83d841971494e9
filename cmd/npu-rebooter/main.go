// Command npu-rebooter: Per-node agent that executes approved reboots of NPU nodes.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

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
