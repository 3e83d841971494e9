package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

func newWedge(stateDir *string) *cobra.Command {
	var node string
	var chips []int
	var sticky bool
	cmd := &cobra.Command{
		Use:   "wedge --node NAME --chip N",
		Short: "make chips of a process-backed node report Critical until its next reboot",
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir := filepath.Join(*stateDir, "run", "nodes", node, "host")
			if _, err := os.Stat(filepath.Join(dir, "state.json")); err != nil {
				return fmt.Errorf("node %q is not a process-backed node of the running cluster (%s): %w", node, dir, err)
			}
			h := simhost.Open(dir)
			if err := h.Wedge(chips...); err != nil {
				return err
			}
			if sticky {
				return h.Update(func(st *simhost.State) error { st.StickyWedge = true; return nil })
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "node name (required)")
	cmd.Flags().IntSliceVar(&chips, "chip", []int{0}, "chip index to wedge (repeatable)")
	cmd.Flags().BoolVar(&sticky, "sticky", false, "the fault survives reboots")
	_ = cmd.MarkFlagRequired("node")
	return cmd
}
