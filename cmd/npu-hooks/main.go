// Command npu-hooks: Driver rollout hooks: preflight, rollout, plan and status.
package main

import (
	"fmt"
	"os"

	"github.com/openfuyao/npu-stack/internal/cli"
)

func main() {
	var opts cli.GlobalOptions
	root := cli.NewRoot("npu-hooks", "Driver rollout hooks: preflight, rollout, plan and status", &opts)
	if err := root.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "npu-hooks: %v\n", err)
		os.Exit(1)
	}
}
