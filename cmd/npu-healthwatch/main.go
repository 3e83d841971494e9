// Command npu-healthwatch: Per-node NPU chip health-watch, driver entry gate, validator and CDI generator.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/openfuyao/npu-stack/internal/healthwatch"
)

func main() {
	// SIGTERM is how the kubelet stops the driver pod's containers; the
	// idling commands return cleanly on it.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := healthwatch.NewRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", healthwatch.Name, err)
		os.Exit(1)
	}
}
