// Command device-plugin is the test bed's stand-in for the MindCluster
// v7.3.0 device plugin binary (/usr/local/bin/device-plugin in
// ascend-k8sdeviceplugin:v7.3.0). It takes upstream's flags
// (component/ascend-device-plugin/main.go) and logs to -logFile as
// upstream does; see package deviceplugin for what it does.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/openfuyao/npu-stack/tests/testbed/standin/deviceplugin"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "device-plugin:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("device-plugin", flag.ContinueOnError)
	// Upstream's flags (main.go); only -logFile changes what the stand-in
	// does, the others are accepted as upstream accepts them.
	logFile := fs.String("logFile", "/var/log/mindx-dl/devicePlugin/devicePlugin.log", "log file")
	for _, b := range []string{"fdFlag", "useAscendDocker", "volcanoType", "version", "autoStowing", "presetVirtualDevice",
		"use310PMixedInsert", "dealWatchHandler", "checkCachedPods", "enableSlowNode"} {
		fs.Bool(b, false, "upstream flag")
	}
	for _, i := range []string{"listWatchPeriod", "logLevel", "maxAge", "maxBackups", "hotReset", "shareDevCount",
		"linkdownTimeout", "thirdPartyScanDelay"} {
		fs.Int(i, 0, "upstream flag")
	}
	fs.String("edgeLogFile", "", "upstream flag")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*logFile), 0o750); err != nil {
		return fmt.Errorf("log directory: %w", err)
	}
	f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	defer func() { _ = f.Close() }()
	logger := log.New(io.MultiWriter(os.Stderr, f), "", log.LstdFlags)
	rc, err := rest.InClusterConfig()
	if err != nil {
		return fmt.Errorf("in-cluster config: %w", err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return deviceplugin.Run(ctx, deviceplugin.Config{
		Node:       os.Getenv("NODE_NAME"),
		DCMIQuery:  "/usr/local/bin/dcmi-query",
		PluginDir:  "/var/lib/kubelet/device-plugins",
		DevDir:     "/dev",
		Client:     client,
		Log:        logger,
		PollPeriod: time.Second,
	})
}
