// Command npu-rebooter: Per-node agent that executes approved reboots of NPU nodes.
package main

import (
	"fmt"
	"os"

	"github.com/openfuyao/npu-stack/internal/cli"
)

func main() {
	var opts cli.GlobalOptions
	root := cli.NewRoot("npu-rebooter", "Per-node agent that executes approved reboots of NPU nodes", &opts)
	if err := root.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "npu-rebooter: %v\n", err)
		os.Exit(1)
	}
}
