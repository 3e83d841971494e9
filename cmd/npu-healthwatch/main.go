// Command npu-healthwatch: Per-node NPU chip health-watch, driver entry gate, validator and CDI generator.
package main

import (
	"fmt"
	"os"

	"github.com/openfuyao/npu-stack/internal/cli"
)

func main() {
	var opts cli.GlobalOptions
	root := cli.NewRoot("npu-healthwatch", "Per-node NPU chip health-watch, driver entry gate, validator and CDI generator", &opts)
	if err := root.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "npu-healthwatch: %v\n", err)
		os.Exit(1)
	}
}
