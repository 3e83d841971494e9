// Command writeprobe is the workload of the real-node tests: it tries to
// create the file given as its argument, prints its uid and the outcome
// on one line, and then waits for SIGTERM, so that a DaemonSet's pod stays
// Running and its log holds the answer.
//
// usage: writeprobe <file>
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: writeprobe <file>")
		os.Exit(2)
	}
	outcome := "ok"
	if err := os.WriteFile(os.Args[1], []byte("written by writeprobe\n"), 0o644); err != nil {
		outcome = err.Error()
	}
	fmt.Printf("uid=%d write %s: %s\n", os.Getuid(), os.Args[1], outcome)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
